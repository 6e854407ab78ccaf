package dataplane

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

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

// drainOutWait bounds the wait for the epoch without the node: the
// control plane batches membership changes into epochs (2 s by default).
const drainOutWait = 30 * time.Second

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
	in := slices.ContainsFunc(e.GetMembers(), func(m *pb.Member) bool { return m.GetId() == id })
	d.mu.Lock()
	defer d.mu.Unlock()
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

// serveDrain is /drain: out of the ring, its keys handed off, then the
// answer; the node keeps running until it is told to stop. Without a
// session the node leaves the ring by ending it, as it does when it stops.
func (n *Node) serveDrain(w http.ResponseWriter, r *http.Request) {
	if !n.session.Connected() {
		if leave := n.leave.Load(); leave != nil {
			(*leave)()
		}
		n.drain()
		fmt.Fprintln(w, "drained: out of the ring; safe to stop")
		return
	}
	out := n.self.request()
	n.session.RequestDrain()
	t := time.NewTimer(drainOutWait)
	defer t.Stop()
	select {
	case <-out:
	case <-r.Context().Done():
		return
	case <-t.C:
		n.log.Warn("no epoch without this node came after its drain request; leaving the ring", "waited", drainOutWait)
		if leave := n.leave.Load(); leave != nil {
			(*leave)()
		}
	}
	n.drain()
	fmt.Fprintln(w, "drained: out of the ring; safe to stop (cachectl undrain "+n.cfg.ID+" gives it its keys back while it runs)")
}

// followSelfDrain undrains the node when an epoch gives it its keys back.
func (n *Node) followSelfDrain(e *pb.RingEpoch) {
	if n.self.epoch(e, n.cfg.ID) {
		n.front.Undrain()
		n.log.Info("undrained: back in the ring", "epoch", e.GetEpoch())
	}
}
