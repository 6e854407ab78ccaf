package dataplane

import (
	"fmt"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/ring"
)

// routes is one epoch made ready for lookups. It is immutable and swapped
// whole, so a request sees one consistent epoch from start to end.
type routes struct {
	epoch  *pb.RingEpoch
	ring   *ring.Ring
	peers  map[string]*pb.Member
	byAddr map[string]string // peer address -> member id
	// prev is the epoch this one replaced (its own prev dropped), and
	// applied when this one took over: handoff asks prev's owners.
	prev    *routes
	applied time.Time
}

// routesWithout is epoch e without member id; nil when id is not a member
// or the only one.
func routesWithout(e *pb.RingEpoch, id string) *routes {
	others := &pb.RingEpoch{Epoch: e.GetEpoch()}
	for _, m := range e.GetMembers() {
		if m.GetId() != id {
			others.Members = append(others.Members, m)
		}
	}
	if len(others.Members) == len(e.GetMembers()) || len(others.Members) == 0 {
		return nil
	}
	rt, err := newRoutes(others)
	if err != nil {
		return nil
	}
	return rt
}

// handoffFrom is the member that owned key in the previous epoch, when it
// was another node and the change is younger than window; else nil.
func (rt *routes) handoffFrom(key, self string, window time.Duration, now time.Time) *pb.Member {
	if rt == nil || rt.prev == nil || window <= 0 || now.Sub(rt.applied) > window {
		return nil
	}
	if m := rt.prev.owner(key); m != nil && m.GetId() != self {
		return m
	}
	return nil
}

func newRoutes(e *pb.RingEpoch) (*routes, error) {
	members := make([]ring.Member, 0, len(e.GetMembers()))
	peers := make(map[string]*pb.Member, len(e.GetMembers()))
	byAddr := make(map[string]string, len(e.GetMembers()))
	for _, m := range e.GetMembers() {
		members = append(members, ring.Member{ID: m.GetId(), Weight: m.GetWeight()})
		peers[m.GetId()] = m
		byAddr[m.GetPeerAddress()] = m.GetId()
	}
	r, err := ring.New(e.GetEpoch(), members)
	if err != nil {
		return nil, fmt.Errorf("epoch %d: %w", e.GetEpoch(), err)
	}
	return &routes{epoch: e, ring: r, peers: peers, byAddr: byAddr}, nil
}

// owner returns the member that owns key.
func (rt *routes) owner(key string) *pb.Member {
	return rt.peers[rt.ring.Owner(key).ID]
}

// owners returns key's first n owners in ring order, appended to dst.
func (rt *routes) owners(dst []*pb.Member, key string, n int) []*pb.Member {
	var buf [4]ring.Member
	for _, m := range rt.ring.AppendOwners(buf[:0], key, n) {
		dst = append(dst, rt.peers[m.ID])
	}
	return dst
}
