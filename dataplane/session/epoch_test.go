package session

import (
	"strings"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// epochLog is an Applier that keeps every epoch applied.
type epochLog struct {
	applier
	epochs chan *pb.RingEpoch
}

func (l *epochLog) ApplyEpoch(e *pb.RingEpoch) { l.epochs <- e }

func members(e *pb.RingEpoch) string {
	var ids []string
	for _, m := range e.GetMembers() {
		ids = append(ids, m.GetId()+"@"+m.GetPeerAddress())
	}
	return strings.Join(ids, ",")
}

// A node that says compact_pushes takes a large ring's members ahead of its
// snapshot, then epochs as changes from the one it applied; a change from
// another epoch ends the stream, and the next snapshot brings the whole ring.
func TestEpochsAsChangesAndMembersAheadOfTheSnapshot(t *testing.T) {
	m := func(id, addr string) *pb.Member { return &pb.Member{Id: id, PeerAddress: addr} }
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		if n > 1 {
			// The reconnect after the bad change: a whole epoch.
			return stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: &pb.Snapshot{
				Epoch: &pb.RingEpoch{Epoch: 9, Members: []*pb.Member{m("z", "h:9")}}}}})
		}
		for _, part := range [][]*pb.Member{{m("a", "h:1"), m("b", "h:2")}, {m("c", "h:3")}} {
			if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_SnapshotMembers{SnapshotMembers: &pb.SnapshotMembers{Members: part}}}); err != nil {
				return err
			}
		}
		snap := &pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 1, Members: []*pb.Member{m("d", "h:4")}}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}); err != nil {
			return err
		}
		change := &pb.RingEpochChange{Epoch: 2, BaseEpoch: 1, PreviousEpoch: 1, Upserted: []*pb.Member{m("a", "h:11"), m("e", "h:5")}, Removed: []string{"c"}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_EpochChange{EpochChange: change}}); err != nil {
			return err
		}
		bad := &pb.RingEpochChange{Epoch: 4, BaseEpoch: 3, Upserted: []*pb.Member{m("x", "h:0")}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_EpochChange{EpochChange: bad}}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	})
	log := &epochLog{epochs: make(chan *pb.RingEpoch, 8)}
	cfg := Config{Addresses: []string{c.addr}, Member: &pb.Member{Id: "node-1", PeerAddress: "127.0.0.1:9001"},
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	runClientWith(t, c, log, cfg)
	if h := c.waitHellos(t, 1)[0]; !h.GetCompactPushes() {
		t.Fatal("the hello does not say compact_pushes")
	}
	want := []string{
		"a@h:1,b@h:2,c@h:3,d@h:4",  // the members ahead, then the snapshot's
		"a@h:11,b@h:2,d@h:4,e@h:5", // c removed, a changed, e added
		"z@h:9",                    // the change from epoch 3 refused: a new snapshot
	}
	for i, w := range want {
		select {
		case e := <-log.epochs:
			if got := members(e); got != w {
				t.Fatalf("epoch %d applied with %s, want %s", i+1, got, w)
			}
		case <-time.After(time.Minute):
			t.Fatalf("epoch %d not applied within a minute", i+1)
		}
	}
}
