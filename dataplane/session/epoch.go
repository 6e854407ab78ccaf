package session

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// applyEpoch installs e if it is newer than the epoch applied, and keeps it
// for the epoch changes that follow.
func (c *Client) applyEpoch(e *pb.RingEpoch) {
	if e == nil || e.GetEpoch() <= c.applied.Load() {
		return
	}
	e = c.cfg.Epochs.share(e)
	c.apply.ApplyEpoch(e)
	if c.self.epoch(e, c.cfg.Member.GetId()) && c.cfg.OnUndrained != nil {
		c.cfg.OnUndrained(e.GetEpoch())
	}
	c.epochMu.Lock()
	c.current = e
	c.epochMu.Unlock()
	c.applied.Store(e.GetEpoch())
}

// heldEpoch is the epoch the node holds, its number and created_at, for
// the hello: a control plane that has that epoch then leaves its members
// out of the snapshot.
func (c *Client) heldEpoch() (uint64, *timestamppb.Timestamp) {
	c.epochMu.Lock()
	cur := c.current
	c.epochMu.Unlock()
	if cur == nil || c.membersUnheld.Load() {
		return c.Epoch(), nil
	}
	return cur.GetEpoch(), cur.GetCreatedAt()
}

// holds checks that the node holds e, named by its number and created_at,
// whose members a snapshot left out. If not, the stream ends and the next
// hello asks for the members.
func (c *Client) holds(e *pb.RingEpoch) error {
	c.epochMu.Lock()
	cur := c.current
	c.epochMu.Unlock()
	if cur == nil || cur.GetEpoch() != e.GetEpoch() || !proto.Equal(cur.GetCreatedAt(), e.GetCreatedAt()) {
		c.membersUnheld.Store(true)
		return fmt.Errorf("session: the snapshot left out the members of epoch %d as held, but this node holds epoch %d", e.GetEpoch(), cur.GetEpoch())
	}
	c.dropIncoming()
	return nil
}

// maxRingMembers bounds the members a snapshot may send ahead of itself.
const maxRingMembers = 1 << 20

// addIncoming keeps members sent ahead of the snapshot, of epoch n. When
// the sessions' shared EpochCache has that epoch, they are not kept: the
// snapshot takes the cache's copy.
func (c *Client) addIncoming(ms []*pb.Member, n uint64) error {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	if c.incomingShared == nil && len(c.incoming) == 0 && n != 0 {
		c.incomingShared = c.cfg.Epochs.get(n)
	}
	if shared := c.incomingShared; shared != nil {
		if shared.GetEpoch() != n {
			c.incomingShared = nil
			return fmt.Errorf("session: the control plane sent members of epoch %d after members of epoch %d ahead of one snapshot", n, shared.GetEpoch())
		}
		return nil
	}
	if len(c.incoming)+len(ms) > maxRingMembers {
		c.incoming = nil
		return fmt.Errorf("session: the control plane sent more than %d ring members ahead of the snapshot", maxRingMembers)
	}
	c.incoming = append(c.incoming, ms...)
	return nil
}

// dropIncoming forgets the members sent ahead of a snapshot.
func (c *Client) dropIncoming() {
	c.epochMu.Lock()
	c.incoming, c.incomingShared = nil, nil
	c.epochMu.Unlock()
}

// withIncoming is the snapshot's epoch with the members sent ahead of it
// first (or the shared copy of that epoch, when they were not kept).
func (c *Client) withIncoming(e *pb.RingEpoch) (*pb.RingEpoch, error) {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	shared, incoming := c.incomingShared, c.incoming
	c.incoming, c.incomingShared = nil, nil
	switch {
	case shared != nil && shared.GetEpoch() != e.GetEpoch():
		return nil, fmt.Errorf("session: the snapshot has epoch %d, but the members ahead of it were of epoch %d", e.GetEpoch(), shared.GetEpoch())
	case shared != nil:
		return shared, nil
	case len(incoming) == 0 || e == nil:
		return e, nil
	}
	out := proto.CloneOf(e)
	out.Members = append(incoming, e.GetMembers()...)
	return out, nil
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
	if e := c.cfg.Epochs.get(ch.GetEpoch()); e != nil {
		return e, nil // another session built it
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

// EpochCache holds the ring epochs that the sessions sharing it applied,
// one copy of each: an epoch's number names its members, so every session
// at an epoch holds the same ones. It keeps the newest epochCacheMax, and
// the epochs it hands out are read only. A nil cache shares nothing.
type EpochCache struct {
	mu     sync.Mutex
	epochs map[uint64]*pb.RingEpoch
}

// epochCacheMax bounds the epochs an EpochCache keeps.
const epochCacheMax = 8

// get returns the epoch numbered n, if the cache has it.
func (c *EpochCache) get(n uint64) *pb.RingEpoch {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epochs[n]
}

// share returns the cache's copy of e's epoch, keeping e as that copy when
// it has none; at the bound the oldest epoch makes room.
func (c *EpochCache) share(e *pb.RingEpoch) *pb.RingEpoch {
	if c == nil {
		return e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.epochs[e.GetEpoch()]; ok {
		return have
	}
	if c.epochs == nil {
		c.epochs = map[uint64]*pb.RingEpoch{}
	}
	if len(c.epochs) >= epochCacheMax {
		oldest := e.GetEpoch()
		for n := range c.epochs {
			oldest = min(oldest, n)
		}
		if oldest == e.GetEpoch() {
			return e // older than all it keeps: not kept
		}
		delete(c.epochs, oldest)
	}
	c.epochs[e.GetEpoch()] = e
	return e
}
