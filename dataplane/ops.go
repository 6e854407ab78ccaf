package dataplane

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// drain keeps a stopping node serving while its peers take its keys by
// handoff: the session has said goodbye, so the node is out of the next
// epoch. It returns once the peer listener has been idle for drainIdle, or
// after DrainGrace; at once when no peer could hand off from it.
func (n *Node) drain() {
	n.front.Drain()
	rt := n.routes.Load()
	if n.cfg.DrainGrace <= 0 || n.cfg.HandoffWindow <= 0 || rt == nil || len(rt.Epoch.GetMembers()) < 2 {
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

// opsHandler serves health, readiness, metrics and pprof.
func (n *Node) opsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-n.store.Ready():
		default:
			http.Error(w, fmt.Sprintf("not ready: loading the disk tier's index (%d records so far)", n.store.Loaded()), http.StatusServiceUnavailable)
			return
		}
		if n.certs != nil {
			select {
			case <-n.certs.Ready():
			default:
				http.Error(w, "not ready: no peer certificate yet from the control plane at "+n.cfg.ControlPlane, http.StatusServiceUnavailable)
				return
			}
		}
		if n.front.Draining() {
			http.Error(w, "not ready: draining (out of the ring, serving its peers' handoff requests before it stops)", http.StatusServiceUnavailable)
			return
		}
		rt := n.routes.Load()
		member, why := n.session.Member()
		switch {
		case rt == nil && member:
			http.Error(w, "not ready: no ring epoch yet from the control plane at "+n.cfg.ControlPlane, http.StatusServiceUnavailable)
			return
		case rt == nil:
			http.Error(w, "not ready: no ring epoch yet from the control plane at "+n.cfg.ControlPlane+": "+why, http.StatusServiceUnavailable)
			return
		case !member:
			http.Error(w, "not ready: not a member: "+why, http.StatusServiceUnavailable)
			return
		}
		control := "connected"
		if !n.session.Connected() {
			// Still ready: the node serves with what it has. Say the
			// control data may be stale.
			control = "disconnected (stale control data)"
		}
		fmt.Fprintf(w, "ready epoch=%d members=%d policies=%d control=%s\n", rt.Epoch.GetEpoch(), len(rt.Epoch.GetMembers()),
			n.policies.Load().Revision(), control)
	})
	mux.HandleFunc("GET /drain", func(w http.ResponseWriter, _ *http.Request) {
		// A pod's preStop hook: leave the ring, hand the keys off, then
		// answer; the node keeps running until it is told to stop.
		if leave := n.leave.Load(); leave != nil {
			(*leave)()
		}
		n.drain()
		fmt.Fprintln(w, "drained: out of the ring; safe to stop")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// loadReport is what the session reports to the control plane.
func (n *Node) loadReport() *pb.LoadReport {
	st := n.store.Stats()
	t := &n.metrics.Totals
	estRequests, estHits := n.shadow.Totals()
	var epoch uint64
	if rt := n.routes.Load(); rt != nil {
		epoch = rt.Epoch.GetEpoch()
	}
	return &pb.LoadReport{
		Epoch:                 epoch,
		MemoryBytes:           st.MemoryBytes,
		MemoryObjects:         st.MemoryObjects,
		DiskBytes:             st.DiskBytes,
		DiskObjects:           st.DiskObjects,
		RequestsTotal:         t.Requests.Load(),
		HitsTotal:             t.Hits.Load(),
		OriginRequestsTotal:   t.OriginFills.Load(),
		RelayedTotal:          t.Relayed.Load(),
		PeerBytesTotal:        t.PeerBytes.Load(),
		HandoffAnswersTotal:   t.HandoffAnswers.Load(),
		LocalEstimateRequests: estRequests,
		LocalEstimateHits:     estHits,
		ResponseBytesByRoute: func() map[string]uint64 {
			m := make(map[string]uint64, len(n.metrics.RouteBytes))
			for r, c := range n.metrics.RouteBytes {
				m[r] = c.Load()
			}
			return m
		}(),
	}
}
