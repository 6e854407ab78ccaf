package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"

	"github.com/shardcache/shardcache/sdk/authlimit"
	"github.com/shardcache/shardcache/sdk/buildinfo"
	"github.com/shardcache/shardcache/sdk/redact"
)

// rpcBuckets reach a minute: admin calls that wait for acknowledgements
// and etcd requests under a slow disk stay measured.
var rpcBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// metrics are the replica's Prometheus metrics, on a registry of its own
// (the embedded etcd registers on the default one).
type metrics struct {
	reg *prometheus.Registry
	// grpc counts and times every RPC served, by service, method and code;
	// etcd every request to etcd the same way.
	grpc     *grpcprom.ServerMetrics
	etcd     *grpcprom.ClientMetrics
	sessions prometheus.Gauge
	refused  prometheus.Counter
	// busy counts hellos refused for the bound on registrations at once.
	busy   prometheus.Counter
	purges *prometheus.CounterVec
	// purgesThrottled counts purges refused for their caller's rate.
	purgesThrottled prometheus.Counter
	// authFailures counts failed authentications (admin token, join
	// token), authThrottled the attempts refused unread after too many.
	authFailures  *prometheus.CounterVec
	authThrottled *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg:  prometheus.NewRegistry(),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(rpcBuckets))),
		etcd: grpcprom.NewClientMetrics(grpcprom.WithClientHandlingTimeHistogram(grpcprom.WithHistogramBuckets(rpcBuckets))),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardcache_control_sessions", Help: "Node sessions open on this replica.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardcache_control_sessions_refused_total",
			Help: "Node hellos refused because another process held an open session for the id.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardcache_control_sessions_busy_total",
			Help: "Node hellos refused, with a delay to retry after, because the replica was registering as many sessions as it takes at once and too many waited or the wait ran out.",
		}),
		purges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardcache_control_purges_total", Help: "Purges recorded through this replica, by kind (url, prefix, tag).",
		}, []string{"kind"}),
		purgesThrottled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardcache_control_purges_throttled_total", Help: "Purges refused because their caller made more than its rate.",
		}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardcache_control_auth_failures_total", Help: "Failed authentications, by credential (admin, join, relayed_purge: a PURGE a node relays, held against its client).",
		}, []string{"credential"}),
		authThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardcache_control_auth_throttled_total", Help: "Authentication attempts refused unread, their caller having failed too often and another of its attempts waiting to be verified, by credential.",
		}, []string{"credential"}),
	}
	epochs := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "shardcache_control_epochs_written_total", Help: "Ring epochs this replica wrote as leader.",
	}, func() float64 { return float64(s.epochsWritten.Load()) })
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardcache_control_leader", Help: "1 while this replica is the leader that writes epochs.",
	}, func() float64 {
		if s.IsLeader() {
			return 1
		}
		return 0
	})
	epoch := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardcache_control_ring_epoch", Help: "Current ring epoch as this replica sees it.",
	}, func() float64 { return float64(s.hub.epoch().GetEpoch()) })
	marks := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "shardcache_control_purge_watermark_writes_total",
		Help: "Records of this replica's nodes' applied purge revisions written to etcd, each one transaction with the exceptions of its batch.",
	}, func() float64 { return float64(s.marks.writes.Load()) })
	bi := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_build_info", Help: "Always 1; the labels name the build this process runs.",
		ConstLabels: prometheus.Labels{"component": "control", "version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	build.Set(1)
	m.reg.MustRegister(m.grpc, m.etcd, m.sessions, m.refused, m.busy, m.purges, m.purgesThrottled, m.authFailures, m.authThrottled, epochs, leader, epoch, build, marks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// serveOps serves /metrics and /healthz, open, and the runtime profiles
// (/debug/pprof/), with the admin token, on addr until ctx ends.
func (s *Server) serveOps(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/debug/pprof/", s.adminOnly(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", s.adminOnly(redact.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", s.adminOnly(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", s.adminOnly(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", s.adminOnly(pprof.Trace))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving metrics on %s: %w", lis.Addr(), err)
	}
	return nil
}

// adminOnly serves h to a caller with the admin token (Authorization:
// Bearer), checked within the admin credential's limits as an admin call
// is: the profiles show the process's memory, its goroutines and their
// arguments. Without an admin token (admin calls by client certificate
// only) nobody is served.
func (s *Server) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		err = s.checkCredential(r.Context(), credAdmin, authlimit.Key(host), func() bool { return secretEqual(token, s.cfg.AdminToken) })
		switch {
		case errors.Is(err, authlimit.ErrWrong):
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardcache control plane"`)
			http.Error(w, "shardcache: the profiles need the admin token (Authorization: Bearer)", http.StatusUnauthorized)
		case err != nil:
			http.Error(w, "shardcache: "+status.Convert(err).Message(), http.StatusTooManyRequests)
		default:
			h(w, r)
		}
	}
}
