package controlplane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

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

// The ops listener's profiles are the admin's: without the admin token,
// or with a wrong one, they are refused (and the failure counted as an
// admin call's); with it, served.
func TestOpsProfilesNeedTheAdminToken(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.OpsAddr = "127.0.0.1:0" })
	get := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+s.OpsAddr().String()+"/debug/pprof/goroutine?debug=1", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(""); code != http.StatusUnauthorized || strings.Contains(body, "goroutine profile") {
		t.Fatalf("without a token: %d %.80q", code, body)
	}
	if code, _ := get("guess"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d", code)
	}
	if code, body := get(testToken); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("the admin token: %d %.80q", code, body)
	}
	// The command line shows no secret given as a flag.
	saved := os.Args
	os.Args = append(slices.Clone(saved), "--join-token", "a-join-secret")
	defer func() { os.Args = saved }()
	req, _ := http.NewRequest("GET", "http://"+s.OpsAddr().String()+"/debug/pprof/cmdline", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), "a-join-secret") || !strings.Contains(string(b), "--join-token\x00REDACTED") {
		t.Fatalf("the command line: %d %q", resp.StatusCode, b)
	}
	resp, err = http.Get("http://" + s.OpsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), `shardcache_control_auth_failures_total{credential="admin"} 2`) {
		t.Fatalf("the refused profiles are not counted as failed admin authentications")
	}
}

// A caller that keeps failing to authenticate is slowed after its burst:
// its next attempt waits for the refill, and another meanwhile (or one
// that cannot wait that long) is refused unread and counted. The right
// token is never refused for failures: verified after the wait, it
// passes. A node's join from the same address is another credential and
// is not held up at all.
func TestFailedAuthenticationsAreLimitedPerCaller(t *testing.T) {
	s, _, _ := startServer(t, []string{testEtcd(t)}, func(c *Config) {
		c.OpsAddr = "127.0.0.1:0"
		c.AuthRetryEvery = 300 * time.Millisecond
	})
	admin := pb.NewAdminServiceClient(dial(t, s))
	wrong := adminCtx(context.Background(), "guess")
	for i := range authLimitBurst {
		if _, err := admin.ListNodes(wrong, &pb.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("guess %d: %v, want Unauthenticated", i, err)
		}
	}
	hurried, cancel := context.WithTimeout(wrong, 100*time.Millisecond)
	defer cancel()
	_, err := admin.ListNodes(hurried, &pb.ListNodesRequest{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "too many failed authentications") {
		t.Fatalf("guess past the burst that cannot wait: %v, want ResourceExhausted", err)
	}
	if _, err := admin.ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{}); err != nil {
		t.Fatalf("the right token from the throttled caller: %v, want it verified after the wait", err)
	}
	if _, err := admin.ListNodes(wrong, &pb.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a guess after the wait: %v, want Unauthenticated", err)
	}
	resp, err := http.Get("http://" + s.OpsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		fmt.Sprintf(`shardcache_control_auth_failures_total{credential="admin"} %d`, authLimitBurst+1),
		`shardcache_control_auth_throttled_total{credential="admin"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
