package dataplane

import (
	"fmt"

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
