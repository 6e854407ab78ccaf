package routes

import (
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Next is the table for epoch e, applied at now by node self, after old
// (nil: the run's first). again says e is old's epoch once more (a new
// session), so the handoff from the epoch before stays as it was.
func Next(old *Table, e *pb.RingEpoch, self string, now time.Time) (rt *Table, again bool, err error) {
	if rt, err = New(e); err != nil {
		return nil, false, err
	}
	rt.Applied = now
	switch {
	case old != nil && old.Epoch.GetEpoch() == e.GetEpoch():
		rt.Prev, rt.Applied, again = old.Prev, old.Applied, true
	case old != nil:
		prev := *old
		prev.Prev = nil
		rt.Prev = &prev
	case e.GetEpoch() > 1:
		// The first epoch this run sees, of a running ring. A node that
		// has just joined (or come back) takes its keys from the others:
		// the ring without it is where they were. (In a new ring's first
		// epoch every node is as cold as this one.)
		rt.Prev = Without(e, self)
	}
	return rt, again, nil
}

// PeerChange returns the peer addresses of e, and those of the members
// that joined the ring with e or came back to it with a new lease since
// prev (none in a run's first epoch).
func PeerChange(prev *Table, e *pb.RingEpoch) (peers, joined []string) {
	before := map[string]*pb.Member{}
	if prev != nil {
		for _, m := range prev.Epoch.GetMembers() {
			before[m.GetId()] = m
		}
	}
	for _, m := range e.GetMembers() {
		peers = append(peers, m.GetPeerAddress())
		if prev == nil {
			continue
		}
		if was := before[m.GetId()]; was == nil || was.GetPeerAddress() != m.GetPeerAddress() ||
			!was.GetJoinedAt().AsTime().Equal(m.GetJoinedAt().AsTime()) {
			joined = append(joined, m.GetPeerAddress())
		}
	}
	return peers, joined
}
