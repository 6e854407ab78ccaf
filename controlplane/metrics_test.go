package controlplane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// A caller that keeps failing to authenticate is refused unread after
// its burst, and counted; the right token from elsewhere still works, and
// so does a node's join from another credential's caller.
func TestFailedAuthenticationsAreLimitedPerCaller(t *testing.T) {
	s, _, _ := startServer(t, []string{testEtcd(t)}, func(c *Config) { c.OpsAddr = "127.0.0.1:0" })
	admin := pb.NewAdminServiceClient(dial(t, s))
	wrong := adminCtx(context.Background(), "guess")
	for i := range authLimitBurst {
		if _, err := admin.ListNodes(wrong, &pb.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("guess %d: %v, want Unauthenticated", i, err)
		}
	}
	_, err := admin.ListNodes(wrong, &pb.ListNodesRequest{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "too many failed authentications") {
		t.Fatalf("guess past the burst: %v, want ResourceExhausted", err)
	}
	// The limit holds even for the right token from that caller: the
	// guessing caller cannot tell a hit from a miss.
	if _, err := admin.ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the right token from the throttled caller: %v, want ResourceExhausted", err)
	}
	resp, err := http.Get("http://" + s.OpsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		fmt.Sprintf(`shardcache_control_auth_failures_total{credential="admin"} %d`, authLimitBurst),
		`shardcache_control_auth_throttled_total{credential="admin"} 2`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
