package session

import (
	"fmt"
	"slices"
	"strings"

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
	byID := make(map[string]*pb.Member, len(cur.GetMembers())+len(ch.GetUpserted()))
	for _, m := range cur.GetMembers() {
		byID[m.GetId()] = m
	}
	for _, id := range ch.GetRemoved() {
		delete(byID, id)
	}
	for _, m := range ch.GetUpserted() {
		byID[m.GetId()] = m
	}
	e := &pb.RingEpoch{Epoch: ch.GetEpoch(), PreviousEpoch: ch.GetPreviousEpoch(), CreatedAt: ch.GetCreatedAt(), Reason: ch.GetReason(),
		Members: make([]*pb.Member, 0, len(byID))}
	for _, m := range byID {
		e.Members = append(e.Members, m)
	}
	slices.SortFunc(e.Members, func(a, b *pb.Member) int { return strings.Compare(a.GetId(), b.GetId()) })
	return e, nil
}
