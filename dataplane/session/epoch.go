package session

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// applyEpoch installs e if it is newer than the epoch applied, and keeps it
// for the epoch changes that follow.
func (c *Client) applyEpoch(e *pb.RingEpoch) {
	if e == nil || e.GetEpoch() <= c.applied.Load() {
		return
	}
	c.apply.ApplyEpoch(e)
	if c.self.epoch(e, c.cfg.Member.GetId()) && c.cfg.OnUndrained != nil {
		c.cfg.OnUndrained(e.GetEpoch())
	}
	c.epochMu.Lock()
	c.current = e
	c.epochMu.Unlock()
	c.applied.Store(e.GetEpoch())
}

// maxRingMembers bounds the members a snapshot may send ahead of itself.
const maxRingMembers = 1 << 20

// addIncoming keeps members sent ahead of the snapshot.
func (c *Client) addIncoming(ms []*pb.Member) error {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	if len(c.incoming)+len(ms) > maxRingMembers {
		c.incoming = nil
		return fmt.Errorf("session: the control plane sent more than %d ring members ahead of the snapshot", maxRingMembers)
	}
	c.incoming = append(c.incoming, ms...)
	return nil
}

// withIncoming is the snapshot's epoch with the members sent ahead of it
// first.
func (c *Client) withIncoming(e *pb.RingEpoch) *pb.RingEpoch {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	if len(c.incoming) == 0 || e == nil {
		c.incoming = nil
		return e
	}
	out := proto.CloneOf(e)
	out.Members = append(c.incoming, e.GetMembers()...)
	c.incoming = nil
	return out
}

// changed builds the epoch an epoch change makes of the one applied. A
// change from another epoch ends the stream: the next snapshot carries the
// whole epoch.
func (c *Client) changed(ch *pb.RingEpochChange) (*pb.RingEpoch, error) {
	c.epochMu.Lock()
	cur := c.current
	c.epochMu.Unlock()
	if cur.GetEpoch() != ch.GetBaseEpoch() || cur == nil {
		return nil, fmt.Errorf("session: epoch %d came as a change from epoch %d, but this node has epoch %d", ch.GetEpoch(), ch.GetBaseEpoch(), cur.GetEpoch())
	}
	// Both sides are sorted by id: one merge, no map, however large the ring.
	e := &pb.RingEpoch{Epoch: ch.GetEpoch(), PreviousEpoch: ch.GetPreviousEpoch(), CreatedAt: ch.GetCreatedAt(), Reason: ch.GetReason(),
		Members: make([]*pb.Member, 0, len(cur.GetMembers())+len(ch.GetUpserted()))}
	old, up, gone := cur.GetMembers(), ch.GetUpserted(), ch.GetRemoved()
	for len(old) > 0 || len(up) > 0 {
		var next *pb.Member
		switch {
		case len(up) == 0 || len(old) > 0 && old[0].GetId() < up[0].GetId():
			next, old = old[0], old[1:]
		default:
			if len(old) > 0 && old[0].GetId() == up[0].GetId() {
				old = old[1:] // replaced
			}
			next, up = up[0], up[1:]
		}
		for len(gone) > 0 && gone[0] < next.GetId() {
			gone = gone[1:]
		}
		if len(gone) > 0 && gone[0] == next.GetId() {
			continue
		}
		e.Members = append(e.Members, next)
	}
	return e, nil
}
