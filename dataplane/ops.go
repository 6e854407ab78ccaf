package dataplane

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/dataplane/ops"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// drain keeps a stopping node serving while its peers take its keys by
// handoff: the session has said goodbye, so the node is out of the next
// epoch. It returns once the peer listener has been idle for drainIdle, or
// after DrainGrace; at once when no peer could hand off from it.
func (n *Node) drain() {
	n.front.Drain()
	rt := n.routes.Load()
	// A peer may ask for this node's keys; after /drain the ring holds
	// its peers alone, one in a ring of two.
	peer := func(m *pb.Member) bool { return m.GetId() != n.cfg.ID }
	if n.cfg.DrainGrace <= 0 || n.cfg.HandoffWindow <= 0 || rt == nil || !slices.ContainsFunc(rt.Epoch.GetMembers(), peer) {
		return
	}
	start := time.Now()
	n.log.Info("draining: serving handoff requests before stopping", "grace", n.cfg.DrainGrace)
	t := time.NewTicker(drainIdle / 10)
	defer t.Stop()
	for now := range t.C {
		last := n.front.LastPeer()
		if last.Before(start) {
			last = start
		}
		if now.Sub(last) >= drainIdle || now.Sub(start) >= n.cfg.DrainGrace {
			n.log.Info("drained", "after", now.Sub(start).Round(time.Millisecond))
			return
		}
	}
}

// drainIdle is how long the peer listener of a draining node stays idle
// before the node stops.
const drainIdle = time.Second

// opsHandler is the ops listener's handler (package ops), over the node's
// parts.
func (n *Node) opsHandler() http.Handler {
	return ops.Handler(ops.Config{ID: n.cfg.ID, OpsURL: n.cfg.OpsURL, AdminToken: n.cfg.AdminToken, OpsToken: n.cfg.OpsToken,
		TrustLoopback: n.cfg.OpsTrustLoopback, Ready: n.readiness, Drain: n.serveDrain, Load: n.loadReport,
		Metrics: n.metrics, Logs: &n.logs, Store: n.store, Copies: n.hotCopies, Policies: &n.policies, Routes: &n.routes,
		Hot: n.hot, HotKeys: &n.hotKeys, Notes: n.owner.Note, Logger: n.log,
		Warm: n.warmer()})
}

// readiness is /readyz's answer: why the node is not ready, or the ring
// and control data it serves with.
func (n *Node) readiness() (string, bool) {
	select {
	case <-n.store.Ready():
	default:
		return fmt.Sprintf("not ready: loading the disk tier's index (%d records so far; serving from peers and the origin meanwhile)",
			n.store.Loaded()), false
	}
	if n.certs != nil {
		select {
		case <-n.certs.Ready():
		default:
			return "not ready: no peer certificate yet from the control plane at " + n.cfg.ControlPlane, false
		}
	}
	if n.front.Draining() {
		return "not ready: draining (out of the ring, serving its peers' handoff requests before it stops)", false
	}
	rt := n.routes.Load()
	member, why := n.session.Member()
	switch {
	case rt == nil && member:
		return "not ready: no ring epoch yet from the control plane at " + n.cfg.ControlPlane, false
	case rt == nil:
		return "not ready: no ring epoch yet from the control plane at " + n.cfg.ControlPlane + ": " + why, false
	case !member:
		return "not ready: not a member: " + why, false
	}
	control := "connected"
	if !n.session.Connected() {
		// Still ready: the node serves with what it has. Say the control
		// data may be stale.
		control = "disconnected (stale control data)"
	}
	// Still ready with a stripe stopped: the node serves from memory,
	// peers and the origin; say which stripes store nothing new.
	disk, stopped := "ok", n.store.Stats().Stopped
	if len(stopped) > 0 {
		disk = fmt.Sprintf("degraded(%d stripes not storing: %s)", len(stopped), strings.Join(stopped, "; "))
	}
	return fmt.Sprintf("ready epoch=%d members=%d policies=%d control=%s peer_hop=%s disk=%s", rt.Epoch.GetEpoch(), len(rt.Epoch.GetMembers()),
		n.policies.Load().Revision(), control, n.cfg.peerHop(), disk), true
}

// loadReport is what the session reports to the control plane.
func (n *Node) loadReport() *pb.LoadReport {
	var epoch uint64
	if rt := n.routes.Load(); rt != nil {
		epoch = rt.Epoch.GetEpoch()
	}
	return n.metrics.LoadReport(n.store.Stats(), n.shadow, epoch)
}

// drainOutWait bounds the wait for the epoch without the node: the
// control plane batches membership changes into epochs (2 s by default).
const drainOutWait = 30 * time.Second

// serveDrain is /drain (a pod's preStop hook, by shardcache drain): the
// control plane drains the node over its session, as cachectl drain would,
// and the node keeps its session, so cachectl undrain gives the running
// node its keys back. The drain is the process's own: it ends when the
// process leaves. It answers once the node is out of the ring, its keys
// handed off; the node keeps running until it is told to stop. Without a
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
	out := n.session.Drain()
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
