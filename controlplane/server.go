package controlplane

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/authlimit"
)

// shutdownGrace is how long Run waits for in-flight RPCs before it stops
// the gRPC server forcibly.
const shutdownGrace = 5 * time.Second

// Server is one control-plane replica.
type Server struct {
	cfg Config
	log *slog.Logger
	// admit bounds the node sessions registered at once.
	admit    *registrations
	hub      *hub
	policies *policyHub
	purgeHub *purgeHub
	// acks answers purge status from the watermark records; marks are
	// this replica's own sessions' watermarks; loads their load reports.
	acks  *ackView
	marks *watermarks
	loads *loadBook
	// statuses writes the status records of its sessions.
	statuses *statusWriter
	// members tells sessions of changes to their member records (Run
	// makes it, with the etcd client).
	members *memberWatch
	ready   chan struct{}
	addr    atomic.Pointer[net.TCPAddr]

	// Set by Run.
	etcd  *clientv3.Client
	state *state
	ca    atomic.Pointer[certAuthority]

	isLeader      atomic.Bool
	epochsWritten atomic.Uint64
	metrics       *metrics
	opsAddr       atomic.Pointer[net.TCPAddr]
	// limits hold failed authentications against their callers, one
	// limiter per credential: a flood of wrong admin tokens spends no
	// node's joins, and a client guessing through a node spends neither
	// the node's nor another client's allowance.
	limits map[string]*authlimit.Limiter
}

// The credentials, each limited on its own (Server.limits): the join
// token of a node's session, the admin token of an admin call, and the
// admin token of a PURGE a node relays for a client.
const (
	credJoin  = "join"
	credAdmin = "admin"
	credPurge = "relayed_purge"
)

// New checks cfg and returns a replica ready to Run.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, hub: newHub(), policies: newPolicyHub(), purgeHub: newPurgeHub(),
		acks: newAckView(cfg.ForgetAbsentAfter), loads: newLoadBook(), statuses: newStatusWriter(),
		// A node whose session ended stays in the records while its status
		// record may outlive its lease.
		marks: newWatermarks(nil, cfg.ReplicaID, cfg.PurgeAckInterval, 3*cfg.LeaseTTL, cfg.Logger),
		ready: make(chan struct{}), limits: map[string]*authlimit.Limiter{}}
	for _, c := range []string{credJoin, credAdmin, credPurge} {
		s.limits[c] = authlimit.New(cfg.AuthRetryEvery, authLimitBurst, authLimitCallers)
	}
	s.purgeHub.onHead = s.marks.setHead
	s.metrics = newMetrics(s)
	return s, nil
}

// Ready is closed once the replica serves gRPC and reaches etcd.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the bound gRPC address, nil before Ready.
func (s *Server) Addr() net.Addr {
	if a := s.addr.Load(); a != nil {
		return a
	}
	return nil
}

// tracer starts the replica's own spans; a no-op one without tracing.
func (s *Server) tracer() trace.Tracer {
	if s.cfg.TracerProvider == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return s.cfg.TracerProvider.Tracer("github.com/shardcache/shardcache/controlplane")
}

// OpsAddr is the bound metrics address, nil before Ready or without one.
func (s *Server) OpsAddr() net.Addr {
	if a := s.opsAddr.Load(); a != nil {
		return a
	}
	return nil
}

// IsLeader reports whether this replica currently writes epochs.
func (s *Server) IsLeader() bool { return s.isLeader.Load() }

// Run serves until ctx ends, then stops gracefully within shutdownGrace.
func (s *Server) Run(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("control plane listener: %w", err)
	}
	defer lis.Close()
	s.addr.Store(lis.Addr().(*net.TCPAddr))
	if _, port, _ := net.SplitHostPort(s.cfg.ListenAddr); s.cfg.ReplicaID == s.cfg.ListenAddr && port == "0" {
		// Named by the address it listens on, the port picked now: replicas
		// of one etcd tell their records apart by name.
		s.cfg.ReplicaID = lis.Addr().String()
		s.marks.replica = s.cfg.ReplicaID
	}

	cli, etcdErr, closeEtcd, err := s.openEtcd(ctx)
	if err != nil {
		return err
	}
	defer closeEtcd()
	s.etcd = cli
	s.state = &state{kv: cli, prefix: s.cfg.Prefix, forgetAbsent: s.cfg.ForgetAbsentAfter, historyMax: s.cfg.PolicyHistory}
	s.marks.state = s.state
	s.purgeHub.window, s.purgeHub.read = s.cfg.PurgeViewWindow, s.state.purges
	s.members = newMemberWatch(s.state)
	if s.cfg.CA.Enabled {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.EtcdDialTimeout)
		ca, err := s.loadCA(cctx)
		cancel()
		if err != nil {
			return err
		}
		s.ca.Store(ca)
	}

	creds, err := serverCredentials(s.cfg.TLS, s.ca.Load())
	if err != nil {
		return err
	}
	// stopped ends when the replica begins to stop; every session's
	// context is tied to it.
	stopped, stop := context.WithCancel(context.Background())
	defer stop()
	gs := s.grpcServer(stopped, creds)

	var opsLis net.Listener
	if s.cfg.OpsAddr != "" {
		if opsLis, err = net.Listen("tcp", s.cfg.OpsAddr); err != nil {
			return fmt.Errorf("control plane metrics listener: %w", err)
		}
		defer opsLis.Close()
		s.opsAddr.Store(opsLis.Addr().(*net.TCPAddr))
	}

	g, gctx := errgroup.WithContext(ctx)
	if opsLis != nil {
		g.Go(func() error { return s.serveOps(gctx, opsLis) })
	}
	g.Go(func() error {
		if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serving gRPC: %w", err)
		}
		return nil
	})
	g.Go(func() error { return s.watchEpochs(gctx) })
	g.Go(func() error { return s.watchPolicies(gctx) })
	g.Go(func() error { return s.watchPurges(gctx) })
	g.Go(func() error { return s.watchAcks(gctx) })
	g.Go(func() error {
		return s.loadAndWatch(gctx, "member records", s.state.membersPrefix(), s.members.load, s.members.apply)
	})
	g.Go(func() error { s.marks.run(gctx); return nil })
	g.Go(func() error {
		s.statuses.run(gctx, func(r *sessionRun, st *pb.Node) {
			// A rewrite by the session that registered the node needs no
			// newer watermark record: views that watched it keep the
			// registration's revision (ackview.go), and the record is
			// written again within recordRefresh for views read anew.
			if err := s.state.putStatus(gctx, st, r.lease, r.rev); err != nil && gctx.Err() == nil {
				r.log.Warn("recording node status", "err", err)
			}
		})
		return nil
	})
	g.Go(func() error { return s.lead(gctx) })
	g.Go(func() error {
		select {
		case err := <-etcdErr:
			return fmt.Errorf("embedded etcd failed: %w", err)
		case <-gctx.Done():
			return nil
		}
	})
	g.Go(func() error {
		<-gctx.Done()
		stop()
		stopGRPC(gs, shutdownGrace)
		return nil
	})
	// A replica that has not read the purges refuses sessions (a node
	// must not miss one): it is ready, and says it serves, once it has.
	for _, loaded := range []<-chan struct{}{s.purgeHub.ready, s.acks.ready} {
		select {
		case <-loaded:
		case <-gctx.Done():
			return g.Wait()
		}
	}
	close(s.ready)
	s.log.Info("control plane serving", "addr", lis.Addr().String(), "replica", s.cfg.ReplicaID)
	return g.Wait()
}

// openEtcd starts the embedded etcd when no endpoints are configured, and
// connects to etcd. etcdErr says when the embedded etcd fails (nil, never
// ready, with an external one); closeEtcd closes the client, then the
// embedded etcd.
func (s *Server) openEtcd(ctx context.Context) (cli *clientv3.Client, etcdErr <-chan error, closeEtcd func(), err error) {
	endpoints := s.cfg.EtcdEndpoints
	closeEmbedded := func() {}
	if len(endpoints) == 0 {
		e, err := startEmbeddedEtcd(ctx, s.cfg.EmbeddedEtcd)
		if err != nil {
			return nil, nil, nil, err
		}
		closeEmbedded = e.Close
		etcdErr = e.Err()
		endpoints = []string{s.cfg.EmbeddedEtcd.ClientURL}
		s.log.Info("embedded etcd ready", "client_url", s.cfg.EmbeddedEtcd.ClientURL, "dir", s.cfg.EmbeddedEtcd.Dir)
	}
	fail := func(err error) (*clientv3.Client, <-chan error, func(), error) {
		closeEmbedded()
		return nil, nil, nil, err
	}
	etcdTLS, err := s.cfg.EtcdTLS.client()
	if err != nil {
		return fail(err)
	}
	cli, err = clientv3.New(clientv3.Config{
		TLS:         etcdTLS,
		Endpoints:   endpoints,
		DialTimeout: s.cfg.EtcdDialTimeout,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(s.metrics.etcd.UnaryClientInterceptor()),
			grpc.WithChainStreamInterceptor(s.metrics.etcd.StreamClientInterceptor()),
		},
	})
	if err != nil {
		return fail(fmt.Errorf("etcd client for %s: %w", strings.Join(endpoints, ","), err))
	}
	// clientv3 dials lazily: ask once so an unreachable etcd fails now, by name.
	pctx, cancel := context.WithTimeout(ctx, s.cfg.EtcdDialTimeout)
	_, err = cli.Get(pctx, s.cfg.Prefix+"epochs/current")
	cancel()
	if err != nil {
		cli.Close()
		return fail(fmt.Errorf("etcd at %s unreachable: %w", strings.Join(endpoints, ","), err))
	}
	return cli, etcdErr, func() { cli.Close(); closeEmbedded() }, nil
}

// stopGRPC stops gs gracefully, or forcibly once grace has passed.
func stopGRPC(gs *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		gs.Stop()
		<-done
	}
}

// SessionTransport is the gRPC transport the control plane serves node
// sessions with, lease the lease TTL; cmd/scalesim measures its memory
// floor with it.
func SessionTransport(lease time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		// Thousands of node connections are mostly idle: small read
		// buffers, and write buffers given back after each flush.
		grpc.ReadBufferSize(8 << 10), grpc.WriteBufferSize(8 << 10), grpc.SharedWriteBuffer(true),
		// Fixed flow-control windows, as the nodes' sessions use: with
		// gRPC's dynamic windows every message that arrives after a
		// quiet spell starts a bandwidth probe (a window update and a
		// ping, and the ping's answer), so each push and each
		// acknowledgement cost three writes and three reads a side
		// instead of one. 1 MiB a stream and a connection is more than a
		// session's largest message (snapshotMembersBytes).
		grpc.StaticStreamWindowSize(sessionWindow), grpc.StaticConnWindowSize(sessionWindow),
		// Nodes ping every 10s to notice a vanished control plane.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// And the control plane pings a node silent for half a lease: one
		// that is alive but stuck (paused, swapping, partitioned with its
		// socket open) does not answer, its session ends, and its lease
		// expires, so the ring routes around it.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: lease / 2, Timeout: lease / 2}),
	}
}

func (s *Server) grpcServer(stopped context.Context, creds []grpc.ServerOption) *grpc.Server {
	authFn := func(ctx context.Context) (context.Context, error) {
		if verifiedClientCert(ctx) {
			return ctx, nil // mTLS: the handshake verified the caller against the client CA
		}
		cred, who := s.adminCaller(ctx)
		got, _ := auth.AuthFromMD(ctx, "bearer")
		err := s.checkCredential(ctx, cred, who, func() bool { return secretEqual(got, s.cfg.AdminToken) })
		if errors.Is(err, authlimit.ErrWrong) {
			return nil, status.Error(codes.Unauthenticated, "invalid admin token")
		}
		return ctx, err
	}
	// The admin token guards the AdminService and reflection, which lists
	// every service and message; health stays open for probes.
	adminOnly := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service == pb.AdminService_ServiceDesc.ServiceName || strings.HasPrefix(c.Service, "grpc.reflection.")
	})
	panicToStatus := recovery.WithRecoveryHandler(func(p any) error {
		s.log.Error("panic in RPC handler", "panic", p)
		return status.Error(codes.Internal, "internal error")
	})
	logCalls := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		s.log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLevel)}
	if tp := s.cfg.TracerProvider; tp != nil {
		creds = append(creds, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(propagation.TraceContext{}))))
	}
	// What every session sends alike is encoded once (pushes.go).
	opts := append(append(creds, grpc.ForceServerCodecV2(newSharedCodec())), SessionTransport(s.cfg.LeaseTTL)...)
	gs := grpc.NewServer(append(opts,
		grpc.ChainUnaryInterceptor(
			s.metrics.grpc.UnaryServerInterceptor(),
			recovery.UnaryServerInterceptor(panicToStatus),
			logging.UnaryServerInterceptor(logCalls, logOpts...),
			selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(authFn), adminOnly),
		),
		grpc.ChainStreamInterceptor(
			s.metrics.grpc.StreamServerInterceptor(),
			recovery.StreamServerInterceptor(panicToStatus),
			logging.StreamServerInterceptor(logCalls, logOpts...),
			selector.StreamServerInterceptor(auth.StreamServerInterceptor(authFn), adminOnly),
		),
	)...)
	s.admit = newRegistrations(s.cfg.MaxRegistering, registerWait)
	pb.RegisterNodeServiceServer(gs, &nodeService{
		state:      s.state,
		hub:        s.hub,
		policies:   s.policies,
		purges:     s.purgeHub,
		marks:      s.marks,
		loads:      s.loads,
		statuses:   s.statuses,
		members:    s.members,
		joinToken:  s.cfg.JoinToken,
		maxMembers: s.cfg.MaxMembers,
		tlsNames:   s.cfg.TLS.Names,
		checkJoin: func(ctx context.Context, verify func() bool) error {
			return s.checkCredential(ctx, credJoin, authlimit.Key(caller(ctx)), verify)
		},
		leaseTTL: s.cfg.LeaseTTL,
		lease:    &replicaLease{kv: s.state.kv, ttl: s.cfg.LeaseTTL, stopping: stopped.Done()},
		replica:  s.cfg.ReplicaID,
		stopped:  stopped,
		log:      s.log,
		ca:       &s.ca,
		caWanted: s.cfg.CA.Enabled,
		sessions: s.metrics.sessions,
		refused:  s.metrics.refused,
		admit:    s.admit,
		busy:     s.metrics.busy,
	})
	pb.RegisterAdminServiceServer(gs, &adminService{state: s.state, hub: s.hub, policies: s.policies, replica: s.cfg.ReplicaID,
		caller: func(ctx context.Context) string { _, who := s.adminCaller(ctx); return who },
		acks:   s.acks, loads: s.loads, purgeLimit: newPurgeLimiter(s.cfg.PurgeRate, s.cfg.PurgeBurst, authLimitCallers),
		purgesThrottled: s.metrics.purgesThrottled,
		purgesRecorded:  s.metrics.purges, tracer: s.tracer(), warmOps: newWarmClient(), adminToken: s.cfg.AdminToken})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	s.metrics.grpc.InitializeMetrics(gs)
	return gs
}

// callLevel logs successful calls at debug (nodes' sessions and reads are
// routine) and failures at warn.
func callLevel(c codes.Code) logging.Level {
	if c == codes.OK || c == codes.Canceled {
		return logging.LevelDebug
	}
	return logging.LevelWarn
}

// watchEpochs keeps the hub at the current epoch in etcd, whoever wrote it.
func (s *Server) watchEpochs(ctx context.Context) error {
	for ctx.Err() == nil {
		resp, err := s.etcd.Get(ctx, s.state.currentEpochKey())
		if err != nil {
			s.log.Warn("reading current epoch; retrying", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return nil
			}
			continue
		}
		if len(resp.Kvs) > 0 {
			if e, err := decodeEpoch(resp.Kvs[0].Value); err == nil {
				s.hub.publish(e)
			}
		}
		from := clientv3.WithRev(resp.Header.Revision + 1)
		for wr := range s.etcd.Watch(clientv3.WithRequireLeader(ctx), s.state.currentEpochKey(), from) {
			if wr.Err() != nil {
				s.log.Warn("epoch watch interrupted", "err", wr.Err())
				break
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				e, err := decodeEpoch(ev.Kv.Value)
				if err != nil {
					s.log.Error("undecodable epoch record", "err", err)
					continue
				}
				s.hub.publish(e)
			}
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return nil
		}
	}
	return nil
}

// Failed authentications are limited per credential and caller:
// authLimitBurst failures, then one per authLimitEvery (see authlimit),
// for at most authLimitCallers callers tracked.
const (
	authLimitBurst   = 10
	authLimitEvery   = 6 * time.Second
	authLimitCallers = 4096
)

// caller is the address an RPC came from, without its port.
func caller(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// adminCaller names the credential an admin call presents and the caller
// its failures are held against: the address it came from, or, for a
// PURGE a node relays with its join token, the client the node names.
func (s *Server) adminCaller(ctx context.Context) (cred, who string) {
	md, _ := metadata.FromIncomingContext(ctx)
	if client := md.Get(pb.PurgeForMetadata); len(client) == 1 && client[0] != "" {
		if relay := md.Get(pb.RelayTokenMetadata); len(relay) == 1 && secretEqual(relay[0], s.cfg.JoinToken) {
			return credPurge, authlimit.Key(client[0])
		}
	}
	return credAdmin, authlimit.Key(caller(ctx))
}

// secretEqual compares a presented secret with the configured one in
// constant time; nothing matches an unset secret.
func secretEqual(got, want string) bool {
	return want != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// checkCredential verifies a credential of who's within the limits of
// cred: a failure is counted, logged and held against who; a caller out
// of failures waits before it is verified, and is refused
// (ResourceExhausted) only while another attempt of its waits.
func (s *Server) checkCredential(ctx context.Context, cred, who string, verify func() bool) error {
	err := s.limits[cred].Check(ctx, who, verify)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, authlimit.ErrWrong):
		s.metrics.authFailures.WithLabelValues(cred).Inc()
		s.log.Warn("failed authentication", "credential", cred, "caller", who)
		return err
	case errors.Is(err, authlimit.ErrThrottled):
		s.metrics.authThrottled.WithLabelValues(cred).Inc()
		return status.Errorf(codes.ResourceExhausted, "too many failed authentications from %s; retry in %s", who, s.cfg.AuthRetryEvery)
	}
	return status.FromContextError(err).Err()
}
