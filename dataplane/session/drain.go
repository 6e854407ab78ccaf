package session

import (
	"slices"
	"sync"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// RequestDrain asks the control plane to drain this node (DrainRequest):
// out of the ring from the next epoch, until the process leaves or an
// operator undrains it. It is sent on the current session, if one is
// established (Connected); the control plane keeps the drain across the
// process's reconnects.
func (c *Client) RequestDrain() {
	select {
	case c.drainReq <- struct{}{}:
	default: // one is pending already
	}
}

// sendDrain sends the drain request on an established session.
func (c *Client) sendDrain(stream stream, established bool) error {
	if !established {
		return nil
	}
	return stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_DrainRequest{DrainRequest: &pb.DrainRequest{}}})
}

// A node drained by its ops listener's /drain (a pod's preStop hook, by
// shardcache drain) asks the control plane to drain it over its session,
// as cachectl drain would, and keeps its session: so cachectl undrain
// gives the running node its keys back, and it serves as a member again.
// The drain is the process's own: it ends when the process leaves.

// selfDrain follows a drain the node asked for: requested, then out of
// the ring once an epoch without the node comes, then back (undrained)
// when an epoch with it follows.
type selfDrain struct {
	mu    sync.Mutex
	state int           // selfNone, selfRequested or selfOut
	out   chan struct{} // closed when an epoch without the node comes
}

const (
	selfNone = iota
	selfRequested
	selfOut
)

// request starts a drain and returns what is closed once the node is out
// of the ring.
func (d *selfDrain) request() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == selfNone {
		d.state, d.out = selfRequested, make(chan struct{})
	}
	return d.out
}

// epoch follows epoch e: it reports whether e gives the drained node its
// keys back (an operator's undrain).
func (d *selfDrain) epoch(e *pb.RingEpoch, id string) (undrained bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == selfNone {
		return false // no drain of its own to follow: the ring need not be searched
	}
	in := slices.ContainsFunc(e.GetMembers(), func(m *pb.Member) bool { return m.GetId() == id })
	switch {
	case d.state == selfRequested && !in:
		d.state = selfOut
		close(d.out)
	case d.state == selfOut && in:
		d.state = selfNone
		return true
	}
	return false
}

// Drain asks the control plane to drain this node (RequestDrain) and
// returns what is closed once an epoch without the node comes. When a
// later epoch gives the node its keys back, OnUndrained is called.
func (c *Client) Drain() <-chan struct{} {
	out := c.self.request()
	c.RequestDrain()
	return out
}
