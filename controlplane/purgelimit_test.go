package controlplane

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestPurgeLimiterBoundsEachCallerAndTheCallersTracked(t *testing.T) {
	l := newPurgeLimiter(10, 3, 2)
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := l.take("a", now); !ok {
			t.Fatalf("purge %d of a refused within its burst", i)
		}
	}
	if ok, wait := l.take("a", now); ok || wait != 100*time.Millisecond {
		t.Fatalf("past the burst: allowed %v, retry in %s; want refused for 100ms", ok, wait)
	}
	if ok, _ := l.take("b", now); !ok {
		t.Fatal("b was refused for a's purges")
	}
	if ok, _ := l.take("a", now.Add(100*time.Millisecond)); !ok {
		t.Fatal("a is refused after its refill")
	}
	// At the bound, new callers share one bucket and the map stays small.
	for i := range 10 {
		l.take(fmt.Sprint("c", i), now)
	}
	if len(l.callers) > 2 {
		t.Fatalf("%d callers tracked, bound 2", len(l.callers))
	}
}

// dialFrom dials s from a loopback address of its own, as another client.
func dialFrom(t *testing.T, s *Server, ip string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A client past its rate is refused, saying when to come back, and another
// client's purges go through meanwhile, acknowledged by every node.
func TestAPurgeStormIsBoundedPerCaller(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.PurgeRate, c.PurgeBurst = 0.001, 20 }) // no refill within the test
	startAckingNode(t, dial(t, s), "n1", 0, true)
	ctx := adminCtx(context.Background(), testToken)
	storm := pb.NewAdminServiceClient(dialFrom(t, s, "127.0.0.2"))
	other := pb.NewAdminServiceClient(dialFrom(t, s, "127.0.0.3"))
	refused := 0
	for i := range 30 {
		_, err := storm.PurgeTag(ctx, &pb.PurgeTagRequest{Tag: fmt.Sprint("storm-", i), Wait: durationpb.New(10 * time.Second)})
		if status.Code(err) == codes.ResourceExhausted {
			refused++
			if !strings.Contains(err.Error(), "127.0.0.2") || !strings.Contains(err.Error(), "retry in") {
				t.Errorf("refusal %q names neither the caller nor when to retry", err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused != 10 {
		t.Fatalf("%d of 30 purges past a burst of 20 refused, want 10", refused)
	}
	resp, err := other.Purge(ctx, &pb.PurgeRequest{Url: "http://example.com/other", Wait: durationpb.New(10 * time.Second)})
	if err != nil || !resp.GetStatus().GetComplete() {
		t.Fatalf("another caller's purge during the storm: %v %v, want complete", resp.GetStatus(), err)
	}
}
