// Package ops is a node's ops listener: what probes and the scraper read
// (/healthz, /readyz, /metrics, open to all), and the operators' views and
// controls (/stats, /inspect, /log, /members, POST /drain, pprof), each
// behind the token it needs (guard.go). The views read the node's parts
// as they are, changing nothing: no lookup counts, no LRU moves.
package ops

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/internal/sketch"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
	"github.com/shardcache/shardcache/sdk/redact"
)

// Config is what the ops listener serves and checks.
type Config struct {
	// ID and OpsURL are the node's id and the listener's base URL as
	// cachectl reaches it (/members).
	ID, OpsURL string
	// AdminToken serves every guarded endpoint; OpsToken, when set, the
	// read-only views. TrustLoopback serves loopback callers without one.
	AdminToken, OpsToken string
	TrustLoopback        bool
	// Ready is the node's readiness: /readyz's line, and whether it is.
	Ready func() (line string, ok bool)
	// Drain serves POST /drain (a pod's preStop hook).
	Drain http.HandlerFunc
	// Warm serves POST /warm; nil: the node warms nothing.
	Warm Warmer
	// Load is the node's load report, computed now (/stats).
	Load func() *pb.LoadReport
	// What the views read.
	Metrics  *metrics.Set
	Logs     *logstream.Hub
	Store    *store.Store
	Copies   *store.Memory // nil: no hot copies
	Policies *atomic.Pointer[policy.Set]
	Routes   *atomic.Pointer[routes.Table]
	Hot      *sketch.Sketch // nil: hot-key handling is off
	HotKeys  *hotkey.List
	// Notes is the owner's last note of a key (owner.Owner.Note), for
	// /inspect; nil for none.
	Notes  func(key string) (owner.Note, bool)
	Logger *slog.Logger
}

// listener serves one node's ops requests.
type listener struct{ cfg Config }

// Handler is the ops listener's handler.
func Handler(cfg Config) http.Handler {
	l := &listener{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		line, ok := l.cfg.Ready()
		if !ok {
			http.Error(w, line, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, line)
	})
	mux.HandleFunc("GET /drain", func(w http.ResponseWriter, _ *http.Request) {
		// What changes the node's state is a POST: a link, a prefetch or
		// a crawler following one must not drain it.
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "ops listener: /drain takes the node out of the ring: send it as a POST", http.StatusMethodNotAllowed)
	})
	mux.HandleFunc("POST /drain", l.guard(adminOnly, l.cfg.Drain)) // a pod's preStop hook
	mux.HandleFunc("GET /stats", l.guard(readOnly, l.serveStats))
	mux.HandleFunc("POST /warm", l.guardWarm(l.serveWarm))
	mux.HandleFunc("GET /inspect", l.guard(readOnly, l.serveInspect))
	mux.HandleFunc("GET /log", l.guard(readOnly, l.serveLog))
	mux.HandleFunc("GET /members", l.guard(readOnly, l.serveMembers))
	mux.Handle("GET /metrics", promhttp.HandlerFor(l.cfg.Metrics.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("/debug/pprof/", l.guard(adminOnly, pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", l.guard(adminOnly, redact.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", l.guard(adminOnly, pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", l.guard(adminOnly, pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", l.guard(adminOnly, pprof.Trace))
	return mux
}
