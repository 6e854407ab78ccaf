package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/shardcache/shardcache/dataplane/front"
	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/clientconn"
	"github.com/shardcache/shardcache/dataplane/internal/h1"
	"github.com/shardcache/shardcache/dataplane/internal/rawio"
	"github.com/shardcache/shardcache/dataplane/internal/sketch"
	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/internal/tracing"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/origin"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/registry"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/session"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/buildinfo"
	"github.com/shardcache/shardcache/sdk/policy"
	"github.com/shardcache/shardcache/sdk/redact"
)

// shutdownGrace is how long in-flight requests may take to finish when the
// node stops; then connections are closed.
const shutdownGrace = 10 * time.Second

// maxClientHeader bounds a client request's line and header fields; larger
// ones are answered 431.
const maxClientHeader = 64 << 10

// server is one listener's server: the client port's (h1) or net/http's.
type server interface {
	Serve(l net.Listener) error
	Shutdown(ctx context.Context) error
	Close() error
}

// servePlain is a net/http server in plain text.
type servePlain struct{ *http.Server }

// Node is one cache node: the parts below it, wired. Its own jobs are
// the ones that span them: applying the ring epochs, policies and purges
// the control plane pushes, and the listeners' lives.
type Node struct {
	cfg Config
	// leave ends the session, which takes the node out of the ring; set
	// by Run.
	leave   atomic.Pointer[context.CancelFunc]
	log     *slog.Logger
	access  *slog.Logger // nil: no access log
	metrics *metrics.Set
	// store is the memory tier over the disk tier; opened by Run.
	store *store.Store
	// hotCopies holds copies of hot objects this node does not own, so they
	// stop paying the relay hop; nil when hot-key handling is off.
	hotCopies *store.Memory
	hot       *sketch.Sketch
	hotKeys   hotkey.List
	logs      logstream.Hub // the access-log streams operators open
	routes    atomic.Pointer[routes.Table]
	policies  atomic.Pointer[policy.Set]
	origin    *origin.Client
	upstream  *registry.Client
	peers     *relay.Client
	peerTLS   *tls.Config // the relay's; nil: h2c
	serverTLS *tls.Config // the peer listener's; nil: h2c
	// tracer starts the node's own spans; nil when it does not trace.
	tracer trace.Tracer
	// certs is the peer certificate the control plane issues, when it does.
	certs   *relay.Certs
	session *session.Client
	// admin calls the control plane's AdminService for PURGE requests.
	admin *session.Admin

	ready chan struct{}
	addrs [3]atomic.Pointer[net.TCPAddr] // client, peer, ops
	// publicPort is ":<port>" of the public URL, or "" for its scheme's
	// default; set once the client listener is bound (publicPortOf).
	publicPort atomic.Pointer[string]

	// tasks owns the goroutines of work no client waits on; Run stops
	// them and waits for them before the store closes.
	tasks *tasks.Group

	// bans are the purges in force, which purges applies and keeps in
	// the data directory. inflight tracks running fills for the sweep.
	bans     *purge.Set
	purges   *purge.Applier
	inflight purge.Inflight
	// shadow estimates what a local-only cache would have hit.
	shadow *metrics.Shadow

	// owner and front are built by Run once the store is open, before
	// anything is served or any push applied.
	owner *owner.Owner
	front *front.Front
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
		metrics: metrics.New(),
		ready:   make(chan struct{}),
		bans:    purge.New(),
	}
	n.shadow = metrics.NewShadow(cfg.DiskBytes, metrics.MaxTracked)
	n.metrics.WatchShadow(n.shadow)
	n.tasks = tasks.New(func(task string, v any, stack []byte) {
		n.metrics.BackgroundPanics.WithLabelValues(task).Inc()
		n.log.Error("background task failed", "task", task, "panic", v, "stack", string(stack))
	})
	if cfg.TracerProvider != nil {
		n.tracer = cfg.TracerProvider.Tracer(tracing.Scope)
	}
	n.origin = origin.New(origin.Config{
		Default:       originURL,
		Via:           routes.Via(cfg.ID, cfg.AdvertisePeerAddr),
		HeaderTimeout: cfg.OriginTimeout,
		Wrap: func(rt http.RoundTripper) http.RoundTripper {
			return tracing.Transport(n.cfg.TracerProvider, rt, "origin")
		},
		Observe: func(d time.Duration) { n.metrics.OriginDuration.Observe(d.Seconds()) },
		Logger:  n.log,
	})
	if cfg.AccessLog != nil {
		n.access = slog.New(slog.NewJSONHandler(cfg.AccessLog, nil))
	}
	csr, err := n.peerHop()
	if err != nil {
		return nil, err
	}
	n.session, err = session.New(session.Config{
		Addresses: strings.Split(cfg.ControlPlane, ","),
		Member: &pb.Member{
			Id:            cfg.ID,
			PeerAddress:   cfg.AdvertisePeerAddr,
			PublicUrl:     cfg.PublicURL,
			OpsUrl:        cfg.OpsURL,
			Weight:        cfg.Weight,
			Zone:          cfg.Zone,
			CapacityBytes: cfg.MemoryBytes,
			PeerHop:       cfg.peerHop(),
			Version:       buildinfo.Read().Version,
		},
		Load:          n.loadReport,
		JoinToken:     cfg.JoinToken,
		TLS:           cfg.ControlPlaneTLS,
		CSR:           csr,
		OnCertificate: n.applyCertificate,
		OnUndrained: func(epoch uint64) {
			n.front.Undrain()
			n.log.Info("undrained: back in the ring", "epoch", epoch)
		},
		OnMembership: func(member bool, cause, _ string) {
			n.metrics.Member.Set(metrics.BoolGauge(member))
			if !member {
				n.metrics.MemberLost.WithLabelValues(cause).Inc()
			}
		},
		TracerProvider: cfg.TracerProvider,
		Logger:         n.log,
	}, n)
	if err != nil {
		return nil, err
	}
	if cfg.peerHop() == "insecure" {
		n.log.Warn("the peer hop authenticates no one (--insecure-peer-hop): whoever reaches the peer listener can fill this node's cache",
			"peer", cfg.PeerAddr)
	}
	if n.admin, err = session.DialAdmin(cfg.ControlPlane, cfg.ControlPlaneTLS); err != nil {
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
		n.hot = sketch.New(1<<16, 3*time.Second, nil)
	}
	return n, nil
}

// peerID names the member listening at a peer address in the current epoch.
func (n *Node) peerID(addr string) (string, bool) {
	rt := n.routes.Load()
	if rt == nil {
		return "", false
	}
	return rt.PeerID(addr)
}

// ApplyPolicies swaps in the policy set after a push, or refuses a push it
// cannot run; the set in force then stays.
func (n *Node) ApplyPolicies(ps *pb.PolicySet) error {
	next, err := n.policies.Load().Apply(ps)
	if err != nil {
		return err
	}
	n.policies.Store(next)
	n.metrics.PolicyRevision.Set(float64(next.Revision()))
	n.log.Info("applied policies", "revision", next.Revision(), "policies", next.Len(), "incremental", ps.GetIncremental())
	return nil
}

// PolicyRevision is the revision of the policy set in force.
func (n *Node) PolicyRevision() int64 { return n.policies.Load().Revision() }

// ApplyPurges applies the purges the control plane pushes (purge.Applier).
func (n *Node) ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult)) { n.purges.Apply(ps, report) }

// PurgeRevision is the highest purge revision this node has applied.
func (n *Node) PurgeRevision() int64 { return n.bans.Revision() }

// CaughtUp says the purges missed while the node was away are applied:
// objects stored before this run may be served again, as far as the bans
// allow.
func (n *Node) CaughtUp() { n.owner.CaughtUp() }

// ApplyEpoch installs a ring epoch pushed by the control plane.
func (n *Node) ApplyEpoch(e *pb.RingEpoch) {
	if len(e.GetMembers()) == 0 {
		// Every node left (the cluster stopped): not an error, and nothing
		// to route by. This node's own join makes the next epoch.
		n.log.Info("ring epoch has no members; waiting for the next", "epoch", e.GetEpoch())
		return
	}
	rt, again, err := routes.Next(n.routes.Load(), e, n.cfg.ID, time.Now())
	if err != nil {
		n.log.Error("refusing ring epoch", "epoch", e.GetEpoch(), "err", err)
		return
	}
	n.routes.Store(rt)
	n.peers.Ring(routes.PeerChange(rt.Prev, e))
	if rt.Prev != nil && !again && n.hot != nil && n.cfg.HandoffWindow > 0 && n.owner != nil {
		n.tasks.Go("precopy", func() { n.owner.Precopy(rt) })
	}
	n.metrics.RingEpoch.Set(float64(e.GetEpoch()))
	n.metrics.RingMembers.Set(float64(len(e.GetMembers())))
	n.log.Info("applied ring epoch", "epoch", e.GetEpoch(), "members", len(e.GetMembers()), "reason", e.GetReason())
}

// Ready is closed once every listener is bound.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// MemoryBudget is the node's memory budget for cached objects (--memory,
// its default applied).
func (n *Node) MemoryBudget() int64 { return n.cfg.MemoryBytes }

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
	defer n.peers.Close()
	defer n.closeIdle()
	defer func() {
		n.admin.Close()
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
	st, err := n.openStore(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	n.store = st
	n.build()
	if err := n.purges.Restore(dir); err != nil {
		return err
	}
	n.metrics.WatchStore(st)
	listeners, err := n.listen()
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	if err != nil {
		return err
	}
	servers := n.servers()

	g, gctx := errgroup.WithContext(ctx)
	sctx, leave := context.WithCancel(gctx)
	defer leave()
	n.leave.Store(&leave)
	for i, s := range servers {
		l := listeners[i]
		g.Go(func() error {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
	n.background(gctx, g, st)
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
		"ops", listeners[2].Addr().String(), "control_plane", n.cfg.ControlPlane, "origin", redact.URL(n.cfg.Origin))
	err = g.Wait()
	// Clients are gone; end the fills still running (nothing partial is
	// stored) before the store closes.
	n.tasks.Stop()
	return err
}

// background starts, in g, the node's work no request waits on: the
// purge sweep once the disk tier's index is loaded, certificate renewal,
// the hot-key sketch's halving, and the session's gauges.
func (n *Node) background(gctx context.Context, g *errgroup.Group, st *store.Store) {
	g.Go(func() error {
		select {
		case <-st.Ready():
			purge.Sweep(gctx, n.bans, n.owner.Index(), &n.inflight, n.purges.Swept)
		case <-gctx.Done():
		}
		return nil
	})
	if n.certs != nil {
		g.Go(func() error { n.certs.Renew(gctx, n.session.RequestCertificate); return nil })
	}
	if n.hot != nil {
		// The hot-key sketch is halved here, not inside a request.
		n.hot.Owned()
		g.Go(func() error { tasks.Every(gctx, n.hot.Period(), n.hot.Halve); return nil })
	}
	g.Go(func() error {
		tasks.Every(gctx, time.Second, func() {
			n.metrics.Session.Set(metrics.BoolGauge(n.session.Connected()))
			_, cut := n.session.CutOff(n.cfg.CutOffBound, time.Now())
			n.metrics.CutOff.Set(metrics.BoolGauge(cut))
		})
		return nil
	})
}

// openStore opens the memory tier over the disk tier under dir.
func (n *Node) openStore(dir string) (*store.Store, error) {
	memory := n.cfg.MemoryBytes
	if n.cfg.HotThreshold > 0 {
		memory -= n.cfg.HotCopyBytes // hot copies come out of the same budget
	}
	return store.Open(store.Config{
		Dir:             filepath.Join(dir, "cache"),
		DiskBytes:       n.cfg.DiskBytes,
		MinFreeBytes:    n.cfg.DiskMinFree,
		MemoryBytes:     memory,
		MemoryMaxObject: n.cfg.MemoryMaxObject,
		Sync:            n.cfg.DiskSync,
		Group:           httpcache.VariantOf, // a URL's variants, counted and dropped together
		Logger:          n.log,
	})
}

// listen binds the client, peer and ops listeners, in that order; the
// client's and the peer's under the connection bounds of a
// clientconn.Listener. On an
// error, the ones bound are returned, for the caller to close.
func (n *Node) listen() ([]net.Listener, error) {
	listeners := make([]net.Listener, 0, 3)
	for i, a := range []struct{ name, addr string }{{"client", n.cfg.ClientAddr}, {"peer", n.cfg.PeerAddr}, {"ops", n.cfg.OpsAddr}} {
		l, err := net.Listen("tcp", a.addr)
		if err != nil {
			return listeners, fmt.Errorf("%s listener: %w", a.name, err)
		}
		n.addrs[i].Store(l.Addr().(*net.TCPAddr))
		if a.name == "client" {
			pp := publicPortOf(n.cfg.PublicURL, l.Addr().(*net.TCPAddr).Port)
			n.publicPort.Store(&pp)
		}
		if a.name != "ops" { // the data path's sockets
			l = rawio.Listener{Listener: l}
		}
		if a.name == "client" {
			l = clientconn.NewListener(l, clientconn.Config{
				WriteTimeout: max(n.cfg.ClientSendTimeout, 0), MaxPerAddr: max(n.cfg.ClientMaxConnsPerAddr, 0),
				Exempt: func(a netip.Addr) bool {
					return slices.ContainsFunc(n.cfg.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(a) })
				},
				OnRefused: n.metrics.ClientConnsRefused.Inc, OnStalled: n.metrics.ClientStalled.Inc,
			})
		}
		if a.name == "peer" {
			// A peer that stops reading its connection (HTTP/1.1, or every
			// HTTP/2 stream at once) is cut off as a stream is
			// (peerSendTimeout): it holds no handler and no object.
			l = clientconn.NewListener(l, clientconn.Config{MaxPerAddr: max(n.cfg.PeerMaxConnsPerAddr, 0),
				WriteTimeout: peerSendTimeout(n.cfg),
				OnRefused:    n.metrics.PeerRefused.WithLabelValues("conns").Inc, OnStalled: n.metrics.PeerStalled.Inc})
		}
		listeners = append(listeners, l)
	}
	return listeners, nil
}

// publicPortOf is the port clients reach the node on, as a Host carries
// it: ":<port>" from the public URL, the bound client port when that says
// port 0, "" when it is the scheme's default.
func publicPortOf(publicURL string, bound int) string {
	u, err := url.Parse(publicURL)
	if err != nil {
		return ""
	}
	switch port := u.Port(); {
	case port == "0":
		return ":" + strconv.Itoa(bound)
	case port == "", u.Scheme == "http" && port == "80", u.Scheme == "https" && port == "443":
		return ""
	default:
		return ":" + port
	}
}

// servers are the client, peer and ops servers, in listen's order. The
// client port is the data plane's own HTTP/1.1 server, the ops port
// net/http's, the peer port either (peerServer).
func (n *Node) servers() []server {
	opsSrv := &http.Server{Handler: n.opsHandler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)}
	opsSrv.RegisterOnShutdown(n.logs.Shutdown) // log streams end as the ops listener shuts down
	return []server{
		h1.New(h1.Config{Handler: tracing.Handler(n.cfg.TracerProvider, http.HandlerFunc(n.front.ServeClient), "shardcache.client", n.fromTrustedProxy),
			HeaderTimeout: n.cfg.ClientHeaderTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: maxClientHeader,
			ConnContext: clientconn.ConnContext, Logger: n.log}),
		n.peerServer(), servePlain{opsSrv},
	}
}

// peerSendTimeout is how long an answer on the peer hop waits for the
// relaying peer to take a byte: its own client may stall it for the
// client send timeout, and the relay timeout is the margin (it exceeds
// the origin timeout, the longest an answer waits between its own bytes).
// Zero, no bound, when the client send timeout is none.
func peerSendTimeout(c Config) time.Duration {
	if c.ClientSendTimeout <= 0 {
		return 0
	}
	return c.ClientSendTimeout + c.RelayTimeout
}

// fromTrustedProxy reports whether r came from one of the TrustedProxies:
// only their trace context is continued (tracing.Handler).
func (n *Node) fromTrustedProxy(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	return slices.ContainsFunc(n.cfg.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(a) })
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Epoch is the ring epoch the node serves with, 0 before the first.
func (n *Node) Epoch() uint64 {
	if rt := n.routes.Load(); rt != nil {
		return rt.Epoch.GetEpoch()
	}
	return 0
}

// RingMembers is the number of members in the node's current epoch.
func (n *Node) RingMembers() int {
	if rt := n.routes.Load(); rt != nil {
		return len(rt.Epoch.GetMembers())
	}
	return 0
}

// build makes the owner, the front and the purge applier over the open
// store.
func (n *Node) build() {
	c := n.cfg
	n.upstream = n.registryClient()
	n.owner = owner.New(owner.Config{
		ID: c.ID, OriginTimeout: c.OriginTimeout, RelayTimeout: c.RelayTimeout, HandoffWindow: c.HandoffWindow,
		MaxObjectBytes: c.MaxObjectBytes, DiskBytes: c.DiskBytes,
		Store: n.store, Copies: n.hotCopies, CopyMaxObject: c.HotCopyMaxObject, Origin: n.origin, Upstream: n.upstream, Peers: n.peers,
		Routes: &n.routes, Policies: &n.policies, Bans: n.bans, Inflight: &n.inflight, Metrics: n.metrics, Tasks: n.tasks, Tracer: n.tracer, Logger: n.log,
		CutOff: func(now time.Time) (time.Time, bool) { return n.session.CutOff(c.CutOffBound, now) },
	})
	n.front = front.New(front.Config{
		ID: c.ID, Via: routes.Via(c.ID, c.AdvertisePeerAddr), RelayTimeout: c.RelayTimeout, OriginTimeout: c.OriginTimeout,
		BodyTimeout: max(c.ClientBodyTimeout, 0), PeerSendTimeout: peerSendTimeout(c),
		PeerMTLS: n.serverTLS != nil, HotThreshold: c.HotThreshold, Hot: n.hot, HotKeys: &n.hotKeys, Logs: &n.logs,
		PublicPort: func() string {
			if p := n.publicPort.Load(); p != nil {
				return *p
			}
			return ""
		},
		TrustedProxies: c.TrustedProxies, PurgeAllow: c.PurgeAllow, AdminToken: c.AdminToken, JoinToken: c.JoinToken,
		Purger: n.admin, ControlPlane: c.ControlPlane, AccessLog: n.access, AccessLogSample: c.AccessLogSample,
		RequestEpoch: n.session.RequestEpoch,
		Owner:        n.owner, Origin: n.origin, Peers: n.peers, Routes: &n.routes, Policies: &n.policies,
		Shadow: n.shadow, Metrics: n.metrics, Tasks: n.tasks, Tracer: n.tracer, Logger: n.log,
	})
	n.purges = &purge.Applier{NodeID: c.ID, Bans: n.bans, Target: n.owner, Policies: &n.policies,
		Metrics: n.metrics, Tasks: n.tasks, Logger: n.log}
}

// closeIdle closes the idle connections of the node's clients of servers
// outside the cluster: the origin and registries (whose client build
// makes).
func (n *Node) closeIdle() {
	n.origin.CloseIdle()
	if n.upstream != nil {
		n.upstream.CloseIdle()
	}
}
