package session

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// reporter acknowledges every purge it is pushed, as a node does.
type reporter struct{ applier }

func (r *reporter) ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult)) {
	for _, p := range ps {
		report(&pb.PurgeResult{PurgeId: p.GetId(), RevisionApplied: p.GetRevision()})
	}
}

// A push answered by an acknowledgement costs the session one message each
// way: the client's flow-control windows are fixed, so a message that
// arrives after a quiet spell does not start a bandwidth probe (a ping, and
// a window update ahead of it) as gRPC's dynamic windows do for every such
// message. At the control plane's scale that was two thirds of the frames
// and system calls a purge cost.
func TestAPushCostsNoProbe(t *testing.T) {
	const purges = 40
	acked := make(chan int64, purges)
	c := startControlCounting(t, func(n int, stream pb.NodeService_SessionServer) error {
		if err := stream.Send(snapshot(1, 0)); err != nil {
			return err
		}
		for i := 1; i <= purges; i++ {
			p := &pb.Purge{Id: fmt.Sprint("p-", i), Revision: int64(i), Url: fmt.Sprint("http://example.com/", i)}
			if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Purge{Purge: p}}); err != nil {
				return err
			}
			for {
				req, err := stream.Recv()
				if err != nil {
					return err
				}
				if r := req.GetPurgeResult(); r != nil && r.GetRevisionApplied() >= int64(i) {
					acked <- r.GetRevisionApplied()
					break
				}
			}
		}
		<-stream.Context().Done()
		return nil
	}, true)
	runClientWith(t, c, &reporter{}, Config{Addresses: []string{c.addr}, Member: &pb.Member{Id: "node-1", PeerAddress: "127.0.0.1:9001"},
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))})
	for range purges {
		select {
		case <-acked:
		case <-time.After(time.Minute):
			t.Fatal("the client stopped acknowledging purges")
		}
	}
	c.conns.mu.Lock()
	defer c.conns.mu.Unlock()
	if len(c.conns.counts) != 1 {
		t.Fatalf("%d connections, want 1", len(c.conns.counts))
	}
	got := c.conns.counts[0]
	// Keepalive pings come after 10 s of silence, not in this exchange.
	if got.Pings() > purges/10 || got.WindowUpdates() > purges/10 {
		t.Errorf("the client sent %d pings and %d window updates for %d purges acknowledged (%d data frames); want almost none",
			got.Pings(), got.WindowUpdates(), purges, got.Data())
	}
}
