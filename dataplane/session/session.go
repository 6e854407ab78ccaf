// Package session keeps a cache node's Session stream with the control
// plane: it says hello, applies the snapshot and every epoch pushed after it,
// reports load, and reconnects with backoff when the stream breaks. While it
// is disconnected the node keeps serving with the last epoch it applied.
//
// Membership is a state the client tracks, not assumes: the control plane
// says when it refused the node (another process holds a session for its id)
// or ended its session because the member record was deleted, replaced or
// its lease lost; the client then reports not being a member, and registers
// again at once. A stream that stays silent past three times the control
// plane's heartbeat interval is taken for dead and replaced.
package session

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Applier receives what the control plane pushes.
type Applier interface {
	// ApplyEpoch installs a ring epoch. It is called with increasing epochs.
	ApplyEpoch(*pb.RingEpoch)
	// ApplyPolicies installs a policy push, or refuses it with the reason
	// (the node then keeps the set it runs).
	ApplyPolicies(*pb.PolicySet) error
	// PolicyRevision is the revision of the policy set the node runs.
	PolicyRevision() int64
	// ApplyPurges applies purges in order; once it returns, nothing they
	// match is served. It calls report with each one's result, then or
	// later, from any goroutine. The snapshot's purges (maybe none) are
	// applied before its epoch.
	ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult))
	// CaughtUp says the purges missed while the node was away are all
	// applied: the snapshot's, after any sent ahead of it.
	CaughtUp()
	// PurgeRevision is the highest purge revision applied.
	PurgeRevision() int64
}

// Config configures a session Client.
type Config struct {
	// Addresses are host:port of control-plane replicas; each reconnect
	// tries the next. Required.
	Addresses []string
	// Member describes this node as it should appear in the ring. Required.
	Member *pb.Member
	// LoadInterval is how often a load report is sent. Default 5s.
	LoadInterval time.Duration
	// Load returns the report to send; nil sends none.
	Load func() *pb.LoadReport
	// MinBackoff and MaxBackoff bound the wait between reconnects, which
	// doubles after every failure, with jitter. Defaults 200ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// JoinToken is sent in the hello when the control plane requires one.
	JoinToken string
	// TLS, when set, connects over TLS; nil connects in plaintext.
	TLS *tls.Config
	// CSR, when set, is a PEM certificate signing request sent in every
	// hello (and on RequestCertificate); OnCertificate gets each answer.
	CSR           []byte
	OnCertificate func(*pb.Certificate)
	// OnMembership, when set, is called each time the node becomes a member
	// again and each time it learns it is not one (every refusal); reason
	// says why (empty for a member), cause is a short fixed word for metrics.
	OnMembership func(member bool, cause, reason string)
	// OnUndrained, when set, is called when an epoch gives a node that
	// drained itself (Drain) its keys back: an operator undrained it.
	OnUndrained func(epoch uint64)
	// TracerProvider, when set, traces the session's gRPC calls.
	TracerProvider trace.TracerProvider
	// Logger receives connection changes. Default slog.Default().
	Logger *slog.Logger
	// Epochs, when set, is shared by the sessions of many nodes run in one
	// process (a simulation of a large cluster): they hold one copy of
	// each ring epoch instead of one each. A node's own session needs none.
	Epochs *EpochCache
}

// Client is a node's session with the control plane.
type Client struct {
	cfg       Config
	apply     Applier
	connected atomic.Bool
	// heard is when the node last heard from an established session
	// (UnixNano; the start at first); heartbeats whether that session
	// sends them, so that its silence means something.
	heard      atomic.Int64
	heartbeats atomic.Bool
	applied    atomic.Uint64
	certReq    chan struct{}
	// epochReq asks for the current epoch; epochSeen is the newest a peer
	// named.
	epochReq  chan struct{}
	epochSeen atomic.Uint64
	drainReq  chan struct{} // the node drains itself (RequestDrain)
	self      selfDrain     // that drain, followed through the epochs
	// instance tells this process's sessions apart from those of another
	// process started with the same id.
	instance string
	// notMember says why the node is not a member now; nil while it is.
	notMember atomic.Pointer[string]

	// Purge results wait here until a session sends them.
	resultsMu sync.Mutex
	results   []*pb.PurgeResult
	resultReq chan struct{}

	// epochMu guards the epoch last applied, which an epoch change
	// applies to, and the members sent ahead of a snapshot.
	epochMu  sync.Mutex
	current  *pb.RingEpoch
	incoming []*pb.Member
	// incomingShared is the shared copy of the epoch whose members are
	// coming ahead of the snapshot, when the Epochs cache had it.
	incomingShared *pb.RingEpoch
	// membersUnheld is set when a snapshot said the node held an epoch
	// it did not: the next hello does not name the epoch's created_at,
	// so that the members come with the snapshot.
	membersUnheld atomic.Bool
}

// RequestCertificate asks the control plane for a new certificate on the
// current session (or with the next hello, if there is none).
func (c *Client) RequestCertificate() {
	select {
	case c.certReq <- struct{}{}:
	default: // one is pending already
	}
}

// RequestEpoch asks the control plane for the current epoch, when seen (an
// epoch a peer named) is newer than the one applied.
func (c *Client) RequestEpoch(seen uint64) {
	if seen <= c.applied.Load() {
		return
	}
	c.epochSeen.Store(seen)
	select {
	case c.epochReq <- struct{}{}:
	default: // one is pending already
	}
}

// New checks cfg and returns a client that applies pushes to apply.
func New(cfg Config, apply Applier) (*Client, error) {
	if len(cfg.Addresses) == 0 {
		return nil, errors.New("session: no control plane address")
	}
	for _, a := range cfg.Addresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("control plane address %q: %w", a, err)
		}
	}
	if cfg.Member == nil || cfg.Member.GetId() == "" {
		return nil, errors.New("session: member with an id is required")
	}
	if cfg.LoadInterval == 0 {
		cfg.LoadInterval = 5 * time.Second
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{cfg: cfg, apply: apply, certReq: make(chan struct{}, 1), resultReq: make(chan struct{}, 1), epochReq: make(chan struct{}, 1), drainReq: make(chan struct{}, 1),
		instance: fmt.Sprintf("%016x", rand.Uint64())}
	c.heard.Store(time.Now().UnixNano()) // objects stored before the start wait for the first snapshot anyway
	c.notMember.Store(&notRegistered)
	return c, nil
}

// notRegistered is the reason before the first snapshot.
var notRegistered = "not registered with the control plane yet"

// Member reports whether the control plane holds the node as a member now
// and, when it does not, why.
func (c *Client) Member() (bool, string) {
	if r := c.notMember.Load(); r != nil {
		return false, *r
	}
	return true, ""
}

// setMember records the membership and reports it: each loss (every
// refusal counts), and each return.
func (c *Client) setMember(member bool, cause, reason string) {
	was, _ := c.Member()
	if member {
		c.notMember.Store(nil)
	} else {
		c.notMember.Store(&reason)
	}
	if (was != member || !member) && c.cfg.OnMembership != nil {
		c.cfg.OnMembership(member, cause, reason)
	}
}

// Connected reports whether a session is established now.
func (c *Client) Connected() bool { return c.connected.Load() }

// CutOff reports whether the node has heard nothing from the control
// plane for longer than bound (a session that sends no heartbeats, while
// connected, never is), and, if so, before when what the node stored must
// be confirmed by the origin: bound ago. A purge issued during the cut
// then reaches its clients within the bound, as the node's own objects
// age past it: all stored before the cut at once, the rest as they do. A
// negative bound: never cut off.
func (c *Client) CutOff(bound time.Duration, now time.Time) (before time.Time, cut bool) {
	if bound < 0 || c.connected.Load() && !c.heartbeats.Load() {
		return time.Time{}, false
	}
	if now.Sub(time.Unix(0, c.heard.Load())) > bound {
		return now.Add(-bound), true
	}
	return time.Time{}, false
}

// Epoch is the last epoch applied, 0 if none.
func (c *Client) Epoch() uint64 { return c.applied.Load() }

// Run keeps a session open until ctx ends; then it closes the stream
// cleanly, so the control plane removes the node at once.
func (c *Client) Run(ctx context.Context) error {
	rpcs := make([]pb.NodeServiceClient, len(c.cfg.Addresses))
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Notice a control plane that vanished without closing the stream.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		// Fixed flow-control windows, as the control plane's: dynamic
		// ones make every push after a quiet spell start a bandwidth
		// probe, two more writes and reads a side per message.
		grpc.WithStaticStreamWindowSize(window), grpc.WithStaticConnWindowSize(window),
	}
	if tp := c.cfg.TracerProvider; tp != nil {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(propagation.TraceContext{}))))
	}
	for i, addr := range c.cfg.Addresses {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return fmt.Errorf("session: control plane %s: %w", addr, err)
		}
		defer conn.Close()
		rpcs[i] = pb.NewNodeServiceClient(conn)
	}

	backoff := c.cfg.MinBackoff
	for attempt := 0; ctx.Err() == nil; attempt++ {
		addr := c.cfg.Addresses[attempt%len(rpcs)]
		established, err := c.session(ctx, rpcs[attempt%len(rpcs)], addr)
		c.connected.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		refused, retryAfter := c.ended(err, addr)
		if established {
			backoff = c.cfg.MinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if retryAfter > 0 {
			// As the control plane said, spread ±20 % so that the nodes
			// it refused together do not come back together.
			wait = max(wait, jitter(retryAfter))
		}
		if !refused { // a refusal was logged as what it is
			c.cfg.Logger.Warn("control plane unreachable; serving with the last epoch and retrying",
				"control_plane", addr, "err", err, "retry_in", wait.Round(time.Millisecond), "epoch", c.Epoch())
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
	}
	return nil
}

// inbound is one result of the stream's Recv.
type inbound struct {
	resp *pb.SessionResponse
	err  error
}

// snapshotWait bounds how long a new stream may wait for its snapshot.
const snapshotWait = 30 * time.Second

// window is the session's fixed flow-control window, a stream's and the
// connection's: larger than the largest message the control plane sends.
const window = 1 << 20

// stream is one Session stream. Only its reader goroutine calls Recv: the
// loop learns how a stream ended from msgs, never by receiving itself.
type stream struct {
	pb.NodeService_SessionClient
	msgs <-chan inbound
}

// send sends req. When the stream has ended, Send says only io.EOF: the
// status it ended with is what the reader gets next.
func (s stream) send(req *pb.SessionRequest) error {
	err := s.Send(req)
	if !errors.Is(err, io.EOF) {
		return err
	}
	if ended, end := s.end(); ended {
		return end
	}
	return err
}

// end waits, at most goodbyeWait, for the error the stream ended with,
// dropping any message before it; ended is false when it did not end.
func (s stream) end() (ended bool, err error) {
	t := time.NewTimer(goodbyeWait)
	defer t.Stop()
	for {
		select {
		case m := <-s.msgs:
			if m.err != nil {
				return true, m.err
			}
		case <-t.C:
			return false, nil
		}
	}
}

// session runs one stream. established reports whether a snapshot arrived.
func (c *Client) session(ctx context.Context, rpc pb.NodeServiceClient, addr string) (established bool, err error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	st, err := rpc.Session(sctx)
	if err != nil {
		return false, err
	}
	stream, silent, stop := watch(st, cancel)
	defer stop()
	defer func() {
		if d := silent(); d > 0 && err != nil {
			err = fmt.Errorf("no message from the control plane for %s; the stream is taken for dead: %w", d, err)
		}
	}()
	hello := &pb.Hello{Member: c.cfg.Member, PolicyRevision: c.apply.PolicyRevision(),
		PurgeRevision: c.apply.PurgeRevision(), JoinToken: c.cfg.JoinToken, Csr: c.cfg.CSR, Instance: c.instance, CompactPushes: true}
	hello.LastEpoch, hello.LastEpochCreatedAt = c.heldEpoch()
	if err := stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: hello}}); err != nil {
		return false, err
	}
	s := &sessionState{stream: stream, addr: addr}
	c.dropIncoming() // members ahead of a snapshot a broken session never sent
	// Load reports every LoadInterval, each interval jittered by ±20 %:
	// nodes that (re)connected together, as after a control-plane restart,
	// do not all report in the same instant.
	tick := time.NewTimer(jitter(c.cfg.LoadInterval))
	defer tick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return s.established, c.goodbye(stream)
		case <-tick.C:
			tick.Reset(jitter(c.cfg.LoadInterval))
			if c.cfg.Load != nil && s.established {
				err = stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_Load{Load: c.cfg.Load()}})
			}
		case <-c.certReq:
			if len(c.cfg.CSR) > 0 && s.established {
				err = stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_CertificateRequest{CertificateRequest: &pb.CertificateRequest{Csr: c.cfg.CSR}}})
			}
		case <-c.epochReq:
			if s.established && c.epochSeen.Load() > c.applied.Load() {
				err = stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_EpochRequest{EpochRequest: &pb.EpochRequest{Seen: c.epochSeen.Load()}}})
			}
		case <-c.drainReq:
			err = c.sendDrain(stream, s.established)
		case <-c.resultReq:
			if s.established { // else sent after the snapshot
				err = c.sendResults(stream)
			}
		case m := <-stream.msgs:
			err = c.receive(s, m)
		}
		if err != nil {
			return s.established, err
		}
	}
}

// sessionState is what one stream's loop keeps.
type sessionState struct {
	stream      stream
	addr        string // the control plane's, for the log
	established bool   // a snapshot arrived
	catchUpErrs atomic.Int32
}

// watch starts st's reader, which hands every result to the returned
// stream's msgs, the stream's end too, until stop is called. A stream that
// stays silent past its limit is ended, whatever keeps it so: the
// watchdog cancels it, which also wakes a Send blocked on it; silent then
// says how long it waited.
func watch(st pb.NodeService_SessionClient, cancel context.CancelFunc) (s stream, silent func() time.Duration, stop func()) {
	var limit, quiet atomic.Int64 // the watchdog's limit; how long it was silent, once it fired
	limit.Store(int64(snapshotWait))
	watchdog := time.AfterFunc(snapshotWait, func() { quiet.Store(limit.Load()); cancel() })
	msgs := make(chan inbound)
	loopDone, readerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			resp, err := st.Recv()
			if err == nil {
				if snap := resp.GetSnapshot(); snap != nil {
					// Zero: a control plane that sends no heartbeats.
					limit.Store(int64(3 * snap.GetHeartbeatInterval().AsDuration()))
				}
				if d := time.Duration(limit.Load()); d > 0 {
					watchdog.Reset(d)
				} else {
					watchdog.Stop()
				}
			}
			select {
			case msgs <- inbound{resp, err}:
			case <-loopDone:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	stop = func() {
		close(loopDone)
		watchdog.Stop()
		cancel()
		<-readerDone
	}
	return stream{st, msgs}, func() time.Duration { return time.Duration(quiet.Load()) }, stop
}

// receive applies one message from the control plane, or returns how the
// stream ended.
func (c *Client) receive(s *sessionState, m inbound) error {
	if m.err != nil {
		if errors.Is(m.err, io.EOF) {
			return errors.New("control plane closed the session")
		}
		return m.err
	}
	var err error
	switch msg := m.resp.GetMsg().(type) {
	case *pb.SessionResponse_Snapshot:
		err = c.snapshot(s, msg.Snapshot)
	case *pb.SessionResponse_Heartbeat:
	case *pb.SessionResponse_Certificate:
		if c.cfg.OnCertificate != nil {
			c.cfg.OnCertificate(msg.Certificate)
		}
	case *pb.SessionResponse_Epoch:
		c.applyEpoch(msg.Epoch)
	case *pb.SessionResponse_EpochChange:
		var e *pb.RingEpoch
		if e, err = c.changed(msg.EpochChange); err == nil {
			c.applyEpoch(e)
		}
	case *pb.SessionResponse_SnapshotMembers:
		err = c.addIncoming(msg.SnapshotMembers.GetMembers(), msg.SnapshotMembers.GetEpoch())
	case *pb.SessionResponse_Purges:
		c.apply.ApplyPurges(msg.Purges.GetPurges(), c.report)
	case *pb.SessionResponse_MissedPurges:
		// Ahead of the snapshot: too many missed purges for one message.
		ps := msg.MissedPurges.GetPurges()
		c.apply.ApplyPurges(ps, c.catchUpReport(ps, &s.catchUpErrs))
	case *pb.SessionResponse_Purge:
		c.apply.ApplyPurges([]*pb.Purge{msg.Purge}, c.report)
	case *pb.SessionResponse_Policies:
		err = c.applyPolicies(s.stream, msg.Policies)
	}
	if err == nil && s.established {
		// Heard, and what was missed applied: from here on the node is
		// not cut off.
		c.heard.Store(time.Now().UnixNano())
	}
	return err
}

// snapshot applies the state a session starts with.
func (c *Client) snapshot(s *sessionState, snap *pb.Snapshot) error {
	if !s.established {
		c.cfg.Logger.Info("session established", "control_plane", s.addr, "epoch", snap.GetEpoch().GetEpoch())
	}
	s.established = true
	c.heartbeats.Store(snap.GetHeartbeatInterval().AsDuration() > 0)
	c.connected.Store(true)
	c.setMember(true, "", "")
	if cert := snap.GetCertificate(); cert != nil && c.cfg.OnCertificate != nil {
		c.cfg.OnCertificate(cert)
	}
	// Purges missed while away first: the node must not serve what they
	// match once it has an epoch to serve with.
	c.apply.ApplyPurges(snap.GetPurges(), c.catchUpReport(snap.GetPurges(), &s.catchUpErrs))
	c.apply.CaughtUp()
	if err := c.sendResults(s.stream); err != nil {
		return err
	}
	if snap.GetMembersHeld() {
		// The epoch the hello named, or the one before the current
		// (whose change follows): nothing to apply.
		if err := c.holds(snap.GetEpoch()); err != nil {
			return err
		}
	} else {
		e, err := c.withIncoming(snap.GetEpoch())
		if err != nil {
			return err
		}
		c.applyEpoch(e)
	}
	c.membersUnheld.Store(false)
	if ps := snap.GetPolicies(); ps != nil {
		return c.applyPolicies(s.stream, ps)
	}
	return nil
}

// applyPolicies installs a push and acknowledges it, or reports the refusal.
func (c *Client) applyPolicies(stream stream, ps *pb.PolicySet) error {
	ack := &pb.PolicyAck{}
	if err := c.apply.ApplyPolicies(ps); err != nil {
		c.cfg.Logger.Error("refusing policy push; keeping the policies in force", "revision", ps.GetRevision(), "err", err)
		ack.RefusedRevision, ack.Error = ps.GetRevision(), err.Error()
	}
	ack.AppliedRevision = c.apply.PolicyRevision()
	return stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_PolicyAck{PolicyAck: ack}})
}

// goodbyeWait bounds how long a closing node waits for the control plane to
// acknowledge its goodbye.
const goodbyeWait = 2 * time.Second

// goodbye half-closes the stream, which the control plane takes as a clean
// departure, and waits briefly for it to finish.
func (c *Client) goodbye(stream stream) error {
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if ended, _ := stream.end(); !ended {
		return errors.New("control plane did not acknowledge the goodbye")
	}
	return nil
}

// jitter returns d give or take 20 %.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}
