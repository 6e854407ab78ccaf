// Package routes makes ring epochs ready for lookups: who owns a key, its
// first owners for replication, who owned it before the last change (for
// handoff), and which member listens at a peer address. It imports the
// ring's hash (sdk/ring) and the wire types only.
package routes

import (
	"fmt"
	"hash/fnv"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/ring"
)

// Table is one epoch made ready for lookups. It is immutable once
// installed and swapped whole, so a request sees one consistent epoch from
// start to end.
type Table struct {
	Epoch  *pb.RingEpoch
	ring   *ring.Ring
	peers  map[string]*pb.Member
	byAddr map[string]string // peer address -> member id
	vias   map[string]bool   // the members' Via names
	// Prev is the epoch this one replaced (its own Prev dropped), and
	// Applied when this one took over: handoff asks Prev's owners.
	Prev    *Table
	Applied time.Time
}

// Without is epoch e without member id; nil when id is not a member or
// the only one.
func Without(e *pb.RingEpoch, id string) *Table {
	others := &pb.RingEpoch{Epoch: e.GetEpoch()}
	for _, m := range e.GetMembers() {
		if m.GetId() != id {
			others.Members = append(others.Members, m)
		}
	}
	if len(others.Members) == len(e.GetMembers()) || len(others.Members) == 0 {
		return nil
	}
	rt, err := New(others)
	if err != nil {
		return nil
	}
	return rt
}

// HandoffFrom is the member that owned key in the previous epoch, when it
// was another node and the change is younger than window; else nil. A nil
// table has none.
func (rt *Table) HandoffFrom(key, self string, window time.Duration, now time.Time) *pb.Member {
	if rt == nil || rt.Prev == nil || window <= 0 || now.Sub(rt.Applied) > window {
		return nil
	}
	if m := rt.Prev.Owner(key); m != nil && m.GetId() != self {
		return m
	}
	return nil
}

// New makes epoch e ready for lookups; an epoch the ring refuses (no
// members, a duplicate id) is an error.
func New(e *pb.RingEpoch) (*Table, error) {
	members := make([]ring.Member, 0, len(e.GetMembers()))
	peers := make(map[string]*pb.Member, len(e.GetMembers()))
	byAddr := make(map[string]string, len(e.GetMembers()))
	vias := make(map[string]bool, len(e.GetMembers()))
	for _, m := range e.GetMembers() {
		members = append(members, ring.Member{ID: m.GetId(), Weight: m.GetWeight()})
		peers[m.GetId()] = m
		byAddr[m.GetPeerAddress()] = m.GetId()
		vias[Via(m.GetId(), m.GetPeerAddress())] = true
	}
	r, err := ring.New(e.GetEpoch(), members)
	if err != nil {
		return nil, fmt.Errorf("epoch %d: %w", e.GetEpoch(), err)
	}
	return &Table{Epoch: e, ring: r, peers: peers, byAddr: byAddr, vias: vias}, nil
}

// Owner returns the member that owns key.
func (rt *Table) Owner(key string) *pb.Member {
	return rt.peers[rt.ring.Owner(key).ID]
}

// Owners returns key's first n owners in ring order, appended to dst.
func (rt *Table) Owners(dst []*pb.Member, key string, n int) []*pb.Member {
	var buf [4]ring.Member
	for _, m := range rt.ring.AppendOwners(buf[:0], key, n) {
		dst = append(dst, rt.peers[m.ID])
	}
	return dst
}

// Via is the name a member gives itself in the Via field of the requests
// it sends (RFC 9110 7.6.3): its id and a short hash of its peer address.
// The hash tells this cluster's node-1 from another cluster's, so a
// request that comes back to the cluster is told from one that passed
// through another cluster built from the same manifests.
func Via(id, peerAddr string) string {
	h := fnv.New32a()
	h.Write([]byte(peerAddr))
	return fmt.Sprintf("%s.%06x", id, h.Sum32()&0xffffff)
}

// ViaMember reports whether name is the Via name of a member of this
// epoch; a nil table has none.
func (rt *Table) ViaMember(name string) bool {
	return rt != nil && rt.vias[name]
}

// PeerID names the member listening at a peer address.
func (rt *Table) PeerID(addr string) (string, bool) {
	id, ok := rt.byAddr[addr]
	return id, ok
}

// Member reports whether id is a member of this epoch. A node that left
// the ring (or was removed by its lease) is no member from the epoch that
// leaves it out: its peer certificate is refused at once. (A node that
// has just joined and relays before this node has its epoch is refused
// too, and serves the request itself; see front's epochHint.) A nil table
// has no members.
func (rt *Table) Member(id string) bool {
	if rt == nil {
		return false
	}
	_, ok := rt.peers[id]
	return ok
}
