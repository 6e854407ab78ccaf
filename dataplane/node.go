package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/shardcache/shardcache/dataplane/flight"
	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/origin"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/session"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// shutdownGrace is how long in-flight requests may take to finish when the
// node stops; then connections are closed.
const shutdownGrace = 10 * time.Second

// maxClientHeader bounds a client request's line and header fields; larger
// ones are answered 431.
const maxClientHeader = 64 << 10

// Node is one cache node.
type Node struct {
	cfg Config
	// draining is set while a stopping node, out of the ring, still
	// serves its peers' handoff requests; lastPeer is when the peer
	// listener last got a request (UnixNano).
	draining atomic.Bool
	lastPeer atomic.Int64
	// handoffAnswers counts handoff requests answered from the store.
	handoffAnswers atomic.Uint64
	// hotKeys are the keys seen hot here, which peers that gain them in a
	// ring change pre-copy; precopying is set while this node pre-copies.
	hotKeys    hotList
	precopying atomic.Bool
	// leave ends the session, which takes the node out of the ring; set
	// by Run.
	leave   atomic.Pointer[context.CancelFunc]
	log     *slog.Logger
	access  *slog.Logger // nil: no access log
	metrics *metrics
	// store is the memory tier over the disk tier; opened by Run.
	store *store.Store
	// hotCopies holds copies of hot objects this node does not own, so they
	// stop paying the relay hop; nil when hot-key handling is off.
	hotCopies *store.Memory
	hot       *hotkey.Sketch
	flights   flight.Group[*fillShare]
	// variants counts the Vary variants stored per URL key (since start).
	variants  sync.Map
	routes    atomic.Pointer[routes]
	policies  atomic.Pointer[policy.Set]
	origin    *origin.Client
	peers     *relay.Client
	peerTLS   *tls.Config // the relay's; nil: h2c
	serverTLS *tls.Config // the peer listener's; nil: h2c
	// tracer starts the node's own spans; nil when it does not trace.
	tracer trace.Tracer
	// certs is the peer certificate the control plane issues, when it does.
	certs   *peerCerts
	session *session.Client
	// admin calls the control plane's AdminService for PURGE requests.
	admin      []pb.AdminServiceClient
	adminConns []*grpc.ClientConn

	ready chan struct{}
	addrs [3]atomic.Pointer[net.TCPAddr] // client, peer, ops

	// fills tracks the goroutines writing responses to the store; fillCtx
	// ends them when the node stops.
	fills     sync.WaitGroup
	fillCtx   context.Context
	stopFills context.CancelFunc

	// bans are the purges in force; purgeFile keeps them in the data
	// directory. inflight tracks running fills for the sweep.
	bans      *purge.Set
	purgeFile string
	inflight  inflight
	// caughtUp is set once the first session of this run brought the
	// purges missed while the node was away; until then objects stored
	// before started are not served.
	caughtUp atomic.Bool
	started  time.Time
	// shadow estimates what a local-only cache would have hit.
	shadow *shadow

	// waiting counts requests waiting on another request's fill.
	waiting atomic.Int64
	// Totals for load reports.
	requests, hits, originFills, relayed, peerBytes atomic.Uint64
}

// New checks cfg and builds a node; Run starts it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	originURL, _ := url.Parse(cfg.Origin) // checked by Validate
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger.With("node", cfg.ID),
		metrics: newMetrics(),
		ready:   make(chan struct{}),
		bans:    purge.New(),
	}
	n.shadow = newShadow(cfg.DiskBytes, maxTracked)
	n.metrics.watchShadow(n.shadow)
	n.fillCtx, n.stopFills = context.WithCancel(context.Background())
	if cfg.TracerProvider != nil {
		n.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	n.origin = origin.New(origin.Config{
		Default:       originURL,
		Via:           cfg.ID,
		HeaderTimeout: cfg.OriginTimeout,
		Wrap:          func(rt http.RoundTripper) http.RoundTripper { return n.traceTransport(rt, "origin") },
		Observe:       func(d time.Duration) { n.metrics.originDuration.Observe(d.Seconds()) },
		Logger:        n.log,
	})
	if cfg.AccessLog != nil {
		n.access = slog.New(slog.NewJSONHandler(cfg.AccessLog, nil))
	}
	peerTLS, err := loadPeerTLS(cfg.PeerTLS, cfg.ID)
	if err != nil {
		return nil, err
	}
	n.peerTLS = peerTLS
	if peerTLS != nil {
		n.serverTLS = relay.ServerTLS(peerTLS)
	}
	var roots func() *x509.CertPool
	var csr []byte
	if cfg.PeerCertsFromControlPlane {
		if n.certs, err = newPeerCerts(cfg.ID); err != nil {
			return nil, err
		}
		n.peerTLS, n.serverTLS, roots, csr = n.certs.clientTLS(), n.certs.serverTLS(), n.certs.roots, n.certs.csr
	}
	n.peers = relay.New(relay.Config{
		OnConn: func(reused bool) {
			if reused {
				n.metrics.peerConns.WithLabelValues("reused").Inc()
			} else {
				n.metrics.peerConns.WithLabelValues("opened").Inc()
			}
		},
		TLS:    n.peerTLS,
		Roots:  roots,
		PeerID: n.peerID,
		Wrap:   func(rt http.RoundTripper) http.RoundTripper { return n.traceTransport(rt, "relay") },
	})
	sc, err := session.New(session.Config{
		Addresses: strings.Split(cfg.ControlPlane, ","),
		Member: &pb.Member{
			Id:            cfg.ID,
			PeerAddress:   cfg.AdvertisePeerAddr,
			PublicUrl:     cfg.PublicURL,
			Weight:        cfg.Weight,
			Zone:          cfg.Zone,
			CapacityBytes: cfg.MemoryBytes,
		},
		Load:          n.loadReport,
		JoinToken:     cfg.JoinToken,
		TLS:           cfg.ControlPlaneTLS,
		CSR:           csr,
		OnCertificate: n.applyCertificate,
		OnMembership: func(member bool, cause, _ string) {
			n.metrics.member.Set(boolGauge(member))
			if !member {
				n.metrics.memberLost.WithLabelValues(cause).Inc()
			}
		},
		TracerProvider: cfg.TracerProvider,
		Logger:         n.log,
	}, n)
	if err != nil {
		return nil, err
	}
	n.session = sc
	if n.admin, n.adminConns, err = adminClients(cfg); err != nil {
		return nil, err
	}
	n.policies.Store(policy.Empty)
	if cfg.HotThreshold > 0 {
		if n.hotCopies, err = store.NewMemory(cfg.HotCopyBytes); err != nil {
			return nil, err
		}
		// 64k counters a row: a few hundred KiB that tell the hottest
		// thousands of keys apart. Halving every 3s notices a hot key within
		// seconds and forgets a cold one as fast.
		n.hot = hotkey.New(1<<16, 3*time.Second, nil)
	}
	return n, nil
}

// peerServer is the peer listener's server: h2c, or mutual TLS when
// configured.
func (n *Node) peerServer() *http.Server {
	s := &http.Server{Handler: n.traceHandler(http.HandlerFunc(n.servePeer), "shardcache.peer"), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute,
		MaxHeaderBytes: 64 << 10, Protocols: relay.Protocols(true), HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1000}}
	if n.serverTLS != nil {
		s.TLSConfig = n.serverTLS
		s.Protocols = relay.ServerProtocols()
	}
	return s
}

// peerID names the member listening at a peer address in the current epoch.
func (n *Node) peerID(addr string) (string, bool) {
	rt := n.routes.Load()
	if rt == nil {
		return "", false
	}
	id, ok := rt.byAddr[addr]
	return id, ok
}

// loadPeerTLS reads the peer hop's certificate and CA; nil when not
// configured. The certificate must name this node.
func loadPeerTLS(f PeerTLSFiles, id string) (*tls.Config, error) {
	if !f.enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("peer TLS certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("peer TLS certificate: %w", err)
	}
	if got := relay.Identity(leaf); got != id {
		return nil, fmt.Errorf("peer TLS certificate %s names %q, not this node's id %q", f.CertFile, got, id)
	}
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("peer TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("peer TLS CA %s holds no PEM certificate", f.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// ApplyPolicies swaps in the policy set after a push, or refuses a push it
// cannot run; the set in force then stays.
func (n *Node) ApplyPolicies(ps *pb.PolicySet) error {
	next, err := n.policies.Load().Apply(ps)
	if err != nil {
		return err
	}
	n.policies.Store(next)
	n.metrics.policyRevision.Set(float64(next.Revision()))
	n.log.Info("applied policies", "revision", next.Revision(), "policies", next.Len(), "incremental", ps.GetIncremental())
	return nil
}

// PolicyRevision is the revision of the policy set in force.
func (n *Node) PolicyRevision() int64 { return n.policies.Load().Revision() }

// ApplyEpoch installs a ring epoch pushed by the control plane.
func (n *Node) ApplyEpoch(e *pb.RingEpoch) {
	rt, err := newRoutes(e)
	if err != nil {
		n.log.Error("refusing ring epoch", "epoch", e.GetEpoch(), "err", err)
		return
	}
	rt.applied = time.Now()
	again := false
	switch old := n.routes.Load(); {
	case old != nil && old.epoch.GetEpoch() == e.GetEpoch():
		rt.prev, rt.applied, again = old.prev, old.applied, true // the same epoch again (a new session)
	case old != nil:
		prev := *old
		prev.prev = nil
		rt.prev = &prev
	case e.GetEpoch() > 1:
		// The first epoch this run sees, of a running ring. A node that
		// has just joined (or come back) takes its keys from the others:
		// the ring without it is where they were. (In a new ring's first
		// epoch every node is as cold as this one.)
		rt.prev = routesWithout(e, n.cfg.ID)
	}
	n.routes.Store(rt)
	if rt.prev != nil && !again && n.hot != nil && n.cfg.HandoffWindow > 0 && n.store != nil {
		n.background("precopy", func() { n.precopy(rt) })
	}
	n.metrics.ringEpoch.Set(float64(e.GetEpoch()))
	n.metrics.ringMembers.Set(float64(len(e.GetMembers())))
	n.log.Info("applied ring epoch", "epoch", e.GetEpoch(), "members", len(e.GetMembers()), "reason", e.GetReason())
}

// Ready is closed once every listener is bound.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// ClientAddr, PeerAddr and OpsAddr are the bound addresses, nil before Ready.
func (n *Node) ClientAddr() net.Addr { return n.addr(0) }

// PeerAddr is the bound peer listener address.
func (n *Node) PeerAddr() net.Addr { return n.addr(1) }

// OpsAddr is the bound ops listener address.
func (n *Node) OpsAddr() net.Addr { return n.addr(2) }

func (n *Node) addr(i int) net.Addr {
	if a := n.addrs[i].Load(); a != nil {
		return a
	}
	return nil
}

// Run serves until ctx ends, then leaves the ring and stops gracefully.
func (n *Node) Run(ctx context.Context) error {
	if n.hotCopies != nil {
		defer n.hotCopies.Close()
	}
	defer n.peers.CloseIdle()
	defer n.origin.CloseIdle()
	defer func() {
		for _, c := range n.adminConns {
			c.Close()
		}
	}()
	dir := n.cfg.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "shardcache-"+n.cfg.ID+"-")
		if err != nil {
			return fmt.Errorf("temporary data directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	memory := n.cfg.MemoryBytes
	if n.cfg.HotThreshold > 0 {
		memory -= n.cfg.HotCopyBytes // hot copies come out of the same budget
	}
	st, err := store.Open(store.Config{
		Dir:             filepath.Join(dir, "cache"),
		DiskBytes:       n.cfg.DiskBytes,
		MinFreeBytes:    n.cfg.DiskMinFree,
		MemoryBytes:     memory,
		MemoryMaxObject: n.cfg.MemoryMaxObject,
		Logger:          n.log,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	n.store = st
	n.started = time.Now()
	if err := n.restorePurges(dir); err != nil {
		return err
	}
	n.metrics.watchStore(st)
	listeners := make([]net.Listener, 0, 3)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i, a := range []struct{ name, addr string }{{"client", n.cfg.ClientAddr}, {"peer", n.cfg.PeerAddr}, {"ops", n.cfg.OpsAddr}} {
		l, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("%s listener: %w", a.name, err)
		}
		listeners = append(listeners, l)
		n.addrs[i].Store(l.Addr().(*net.TCPAddr))
	}
	servers := []*http.Server{
		{Handler: n.traceHandler(http.HandlerFunc(n.serveClient), "shardcache.client"), ReadHeaderTimeout: n.cfg.ClientHeaderTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: maxClientHeader},
		n.peerServer(),
		{Handler: n.opsHandler(), ReadHeaderTimeout: 10 * time.Second},
	}
	for _, s := range servers {
		s.ErrorLog = slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)
	}

	g, gctx := errgroup.WithContext(ctx)
	sctx, leave := context.WithCancel(gctx)
	defer leave()
	n.leave.Store(&leave)
	for i, s := range servers {
		l := listeners[i]
		g.Go(func() error {
			serve := s.Serve
			if s.TLSConfig != nil {
				serve = func(l net.Listener) error { return s.ServeTLS(l, "", "") }
			}
			if err := serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving %s: %w", l.Addr(), err)
			}
			return nil
		})
	}
	g.Go(func() error {
		// Join the ring only once the disk tier's index is loaded: before,
		// every request routed here would be a miss.
		select {
		case <-st.Ready():
		case <-gctx.Done():
			return nil
		}
		err := n.session.Run(sctx)
		if err != nil && gctx.Err() == nil && sctx.Err() != nil {
			n.log.Warn("leaving the ring", "err", err) // left by /drain; keep serving
			return nil
		}
		return err
	})
	g.Go(func() error {
		select {
		case <-st.Ready():
			n.sweepBans(gctx)
		case <-gctx.Done():
		}
		return nil
	})
	if n.certs != nil {
		g.Go(func() error { n.renewCertificates(gctx); return nil })
	}
	g.Go(func() error {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				n.metrics.session.Set(boolGauge(n.session.Connected()))
			}
		}
	})
	g.Go(func() error {
		<-gctx.Done()
		if ctx.Err() != nil {
			n.drain() // a stop asked for, not a failure
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		for _, s := range servers {
			if err := s.Shutdown(sctx); err != nil {
				s.Close()
			}
		}
		return nil
	})
	close(n.ready)
	n.log.Info("node serving", "client", listeners[0].Addr().String(), "peer", listeners[1].Addr().String(),
		"ops", listeners[2].Addr().String(), "control_plane", n.cfg.ControlPlane, "origin", n.cfg.Origin)
	err = g.Wait()
	// Clients are gone; end the fills still running (nothing partial is
	// stored) before the store closes.
	n.stopFills()
	n.fills.Wait()
	return err
}

// background runs f on a goroutine of the node's, which Run waits for,
// guarded.
func (n *Node) background(task string, f func()) { n.fills.Go(n.guard(task, f)) }

// guard wraps f, work no client waits on, so that a panic in it is logged
// and counted, never fatal.
func (n *Node) guard(task string, f func()) func() {
	return func() {
		defer func() {
			if v := recover(); v != nil {
				n.metrics.backgroundPanics.WithLabelValues(task).Inc()
				n.log.Error("background task failed", "task", task, "panic", v, "stack", string(debug.Stack()))
			}
		}()
		f()
	}
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Epoch is the ring epoch the node serves with, 0 before the first.
func (n *Node) Epoch() uint64 {
	if rt := n.routes.Load(); rt != nil {
		return rt.epoch.GetEpoch()
	}
	return 0
}

// RingMembers is the number of members in the node's current epoch.
func (n *Node) RingMembers() int {
	if rt := n.routes.Load(); rt != nil {
		return len(rt.epoch.GetMembers())
	}
	return 0
}
