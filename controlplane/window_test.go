package controlplane

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/h2frames"
)

// A purge pushed and acknowledged costs the control plane one message each
// way on the node's connection: its flow-control windows are fixed, so an
// acknowledgement after a quiet spell does not start a bandwidth probe (a
// ping, and a window update ahead of it), as gRPC's dynamic windows do for
// every such message. With thousands of sessions those probes were two
// thirds of the frames and system calls of a purge's fan-out.
func TestAPurgeCostsNoProbe(t *testing.T) {
	const purges = 30
	s, _, _ := startServer(t, nil)
	counted := make(chan *h2frames.Counts, 1)
	nodeConn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			w, counts := h2frames.Watch(c, false)
			select {
			case counted <- counts:
			default:
				t.Error("the node's connection was dialled twice")
			}
			return w, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nodeConn.Close() })
	n := openSession(t, nodeConn, "n1")
	counts := <-counted

	admin := pb.NewAdminServiceClient(dial(t, s))
	ctx := adminCtx(context.Background(), testToken)
	before := counts.Data()
	for i := range purges {
		acked := make(chan struct{})
		go func() {
			defer close(acked)
			n.ack(t, n.recvPurge(t), 0)
		}()
		resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: fmt.Sprint("req-", i), Url: fmt.Sprint("http://example.com/", i)})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetStatus().GetComplete() {
			t.Fatalf("purge %d: %v, want it complete", i, resp.GetStatus())
		}
		<-acked
	}
	if got := counts.Data() - before; got < purges {
		t.Fatalf("%d data frames for %d purges pushed: the counting missed them", got, purges)
	}
	// The control plane's keepalive pings a node silent for half a lease,
	// which it never is here.
	if counts.Pings() > purges/10 || counts.WindowUpdates() > purges/10 {
		t.Errorf("the control plane sent %d pings and %d window updates for %d purges acknowledged; want almost none",
			counts.Pings(), counts.WindowUpdates(), purges)
	}
}

// A session the replica keeps busy gets no heartbeats: any message says the
// session is alive, so one goes out only after an interval with nothing
// else sent. An idle session still gets them at the interval.
func TestHeartbeatsOnlyWhenNothingElseWasSent(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.LeaseTTL = 8 * time.Second }) // heartbeats every 2 s
	conn := dial(t, s)
	n := openSession(t, conn, "n1")
	var beats atomic.Int32
	beat := make(chan struct{}, 1)
	go func() {
		for {
			resp, err := n.stream.Recv()
			if err != nil {
				return
			}
			switch {
			case resp.GetHeartbeat() != nil:
				beats.Add(1)
				select {
				case beat <- struct{}{}:
				default:
				}
			case resp.GetPurge() != nil:
				n.ack(t, resp.GetPurge(), 0)
			}
		}
	}()

	// Busy: purges one after another for more than two intervals, which
	// would have brought two heartbeats.
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	purges := 0
	for start := time.Now(); time.Since(start) < 5*time.Second; purges++ {
		resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: fmt.Sprint("busy-", purges), Url: fmt.Sprint("http://example.com/", purges)})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetStatus().GetComplete() {
			t.Fatalf("purge %d: %v, want it complete", purges, resp.GetStatus())
		}
	}
	if got := beats.Load(); got != 0 {
		t.Errorf("%d heartbeats while %d purges were pushed, want none", got, purges)
	}

	// Idle: a heartbeat comes within the interval.
	select {
	case <-beat:
	case <-time.After(30 * time.Second):
		t.Fatal("no heartbeat to an idle session")
	}
}
