package dataplane

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"strings"
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
		fmt.Fprintf(w, "ready epoch=%d members=%d policies=%d control=%s peer_hop=%s\n", rt.Epoch.GetEpoch(), len(rt.Epoch.GetMembers()),
			n.policies.Load().Revision(), control, n.cfg.peerHop())
	})
	mux.HandleFunc("GET /drain", func(w http.ResponseWriter, _ *http.Request) {
		// What changes the node's state is a POST: a link, a prefetch or
		// a crawler following one must not drain it.
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "ops listener: /drain takes the node out of the ring: send it as a POST", http.StatusMethodNotAllowed)
	})
	mux.HandleFunc("POST /drain", n.opsGuard(adminOnly, n.serveDrain)) // a pod's preStop hook
	mux.HandleFunc("GET /stats", n.opsGuard(readOnly, n.serveStats))
	mux.HandleFunc("GET /inspect", n.opsGuard(readOnly, n.serveInspect))
	mux.HandleFunc("GET /log", n.opsGuard(readOnly, n.serveLog))
	mux.HandleFunc("GET /members", n.opsGuard(readOnly, n.serveMembers))
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("/debug/pprof/", n.opsGuard(adminOnly, pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", n.opsGuard(adminOnly, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, strings.Join(redactArgs(os.Args), "\x00"))
	}))
	mux.HandleFunc("/debug/pprof/profile", n.opsGuard(adminOnly, pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", n.opsGuard(adminOnly, pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", n.opsGuard(adminOnly, pprof.Trace))
	return mux
}

// What an ops endpoint needs of its caller: the admin token, or for what
// only reads the node's figures and logs the read-only ops token too.
const (
	adminOnly = false
	readOnly  = true
)

// opsGuard lets h serve only a caller that sends the admin token (or, for
// a read-only endpoint, the ops token): what takes the node out of the
// ring or reads its insides is not for anyone who can reach the ops port.
// A loopback caller is no exception (a sidecar proxy connects from
// loopback), unless the node was told to trust loopback
// (OpsTrustLoopback). The probes' and the scraper's /healthz, /readyz and
// /metrics stay open.
func (n *Node) opsGuard(reads bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.OpsTrustLoopback {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			if a, err := netip.ParseAddr(host); err == nil && a.Unmap().IsLoopback() {
				h(w, r)
				return
			}
		}
		token, sent := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		matches := func(want string) bool {
			return want != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
		}
		switch {
		case sent && (matches(n.cfg.AdminToken) || reads && matches(n.cfg.OpsToken)):
			h(w, r)
			return
		case sent:
			n.metrics.OpsRefused.WithLabelValues("bad_token").Inc()
			n.log.Warn("refused an ops request: wrong token", "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardcache ops"`)
			http.Error(w, "ops listener: the token does not match", http.StatusUnauthorized)
		default:
			n.metrics.OpsRefused.WithLabelValues("no_token").Inc()
			n.log.Warn("refused an ops request: no token", "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardcache ops"`)
			want := "the admin token"
			if reads {
				want = "the admin or the ops token"
			}
			http.Error(w, "ops listener: "+r.URL.Path+" needs Authorization: Bearer <"+want+">", http.StatusUnauthorized)
		}
	}
}

// redactArgs is the command line with the value of every flag that names
// a secret (a token, password or secret) replaced; file paths are kept.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	secret := func(flag string) bool {
		flag = strings.ToLower(strings.TrimLeft(flag, "-"))
		if strings.HasSuffix(flag, "-file") {
			return false // a path, not the secret
		}
		for _, w := range []string{"token", "password", "secret"} {
			if strings.Contains(flag, w) {
				return true
			}
		}
		return false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		out[i] = redactURL(a)
		if !strings.HasPrefix(a, "-") {
			continue
		}
		if name, v, ok := strings.Cut(a, "="); ok {
			out[i] = name + "=" + redactURL(v)
			if secret(name) {
				out[i] = name + "=REDACTED"
			}
			continue
		}
		if secret(a) && i+1 < len(args) {
			i++
			out[i] = "REDACTED"
		}
	}
	return out
}

// redactURL is s with the password of a URL in it replaced ("xxxxx"), for
// logs and the command line; anything else as it is.
func redactURL(s string) string {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
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
		OriginRequestsTotal:   t.OriginRequests.Load(),
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
