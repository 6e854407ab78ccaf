package controlplane

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestMetricsCountRPCsEtcdRequestsAndSessions(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.OpsAddr = "127.0.0.1:0" })
	conn := dial(t, s)
	openSession(t, conn, "n1")
	admin := pb.NewAdminServiceClient(conn)
	if _, err := admin.ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{}); err != nil {
		t.Fatal(err)
	}
	admin.ListNodes(context.Background(), &pb.ListNodesRequest{}) // refused: no token

	resp, err := http.Get("http://" + s.OpsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text := string(b)
	for _, want := range []string{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="ListNodes",grpc_service="shardcache.v1.AdminService",grpc_type="unary"} 1`,
		`grpc_server_handled_total{grpc_code="Unauthenticated",grpc_method="ListNodes",grpc_service="shardcache.v1.AdminService",grpc_type="unary"} 1`,
		`grpc_client_handling_seconds_count{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"}`,
		"shardcache_control_sessions 1",
		"shardcache_control_leader ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
