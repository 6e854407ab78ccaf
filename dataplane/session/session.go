// Package session keeps a cache node's Session stream with the control
// plane: it says hello, applies the snapshot and every epoch pushed after it,
// reports load, and reconnects with backoff when the stream breaks. While it
// is disconnected the node keeps serving with the last epoch it applied.
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
	// TracerProvider, when set, traces the session's gRPC calls.
	TracerProvider trace.TracerProvider
	// Logger receives connection changes. Default slog.Default().
	Logger *slog.Logger
}

// Client is a node's session with the control plane.
type Client struct {
	cfg       Config
	apply     Applier
	connected atomic.Bool
	applied   atomic.Uint64
	certReq   chan struct{}
	// epochReq asks for the current epoch; epochSeen is the newest a peer
	// named.
	epochReq  chan struct{}
	epochSeen atomic.Uint64

	// Purge results wait here until a session sends them.
	resultsMu sync.Mutex
	results   []*pb.PurgeResult
	resultReq chan struct{}
}

// report queues a purge result for the control plane.
func (c *Client) report(r *pb.PurgeResult) {
	c.resultsMu.Lock()
	c.results = append(c.results, r)
	c.resultsMu.Unlock()
	select {
	case c.resultReq <- struct{}{}:
	default:
	}
}

// sendResults sends the queued purge results; those not sent stay queued.
func (c *Client) sendResults(stream pb.NodeService_SessionClient) error {
	c.resultsMu.Lock()
	defer c.resultsMu.Unlock()
	for len(c.results) > 0 {
		if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PurgeResult{PurgeResult: c.results[0]}}); err != nil {
			return recvErr(stream, err)
		}
		c.results = c.results[1:]
	}
	return nil
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
	return &Client{cfg: cfg, apply: apply, certReq: make(chan struct{}, 1), resultReq: make(chan struct{}, 1), epochReq: make(chan struct{}, 1)}, nil
}

// Connected reports whether a session is established now.
func (c *Client) Connected() bool { return c.connected.Load() }

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
		if established {
			backoff = c.cfg.MinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		c.cfg.Logger.Warn("control plane unreachable; serving with the last epoch and retrying",
			"control_plane", addr, "err", err, "retry_in", wait.Round(time.Millisecond), "epoch", c.Epoch())
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

// session runs one stream. established reports whether a snapshot arrived.
func (c *Client) session(ctx context.Context, rpc pb.NodeServiceClient, addr string) (established bool, err error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stream, err := rpc.Session(sctx)
	if err != nil {
		return false, err
	}
	hello := &pb.Hello{Member: c.cfg.Member, LastEpoch: c.Epoch(), PolicyRevision: c.apply.PolicyRevision(),
		PurgeRevision: c.apply.PurgeRevision(), JoinToken: c.cfg.JoinToken, Csr: c.cfg.CSR}
	if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: hello}}); err != nil {
		return false, recvErr(stream, err)
	}

	msgs := make(chan inbound)
	go func() {
		for {
			resp, err := stream.Recv()
			select {
			case msgs <- inbound{resp, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	tick := time.NewTicker(c.cfg.LoadInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return established, c.goodbye(stream, msgs)
		case <-tick.C:
			if c.cfg.Load == nil || !established {
				continue
			}
			if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Load{Load: c.cfg.Load()}}); err != nil {
				return established, recvErr(stream, err)
			}
		case <-c.certReq:
			if len(c.cfg.CSR) == 0 || !established {
				continue
			}
			req := &pb.SessionRequest{Msg: &pb.SessionRequest_CertificateRequest{CertificateRequest: &pb.CertificateRequest{Csr: c.cfg.CSR}}}
			if err := stream.Send(req); err != nil {
				return established, recvErr(stream, err)
			}
		case <-c.epochReq:
			if !established || c.epochSeen.Load() <= c.applied.Load() {
				continue
			}
			req := &pb.SessionRequest{Msg: &pb.SessionRequest_EpochRequest{EpochRequest: &pb.EpochRequest{Seen: c.epochSeen.Load()}}}
			if err := stream.Send(req); err != nil {
				return established, recvErr(stream, err)
			}
		case <-c.resultReq:
			if !established {
				continue // sent after the snapshot
			}
			if err := c.sendResults(stream); err != nil {
				return established, err
			}
		case m := <-msgs:
			if m.err != nil {
				if errors.Is(m.err, io.EOF) {
					return established, errors.New("control plane closed the session")
				}
				return established, m.err
			}
			switch msg := m.resp.GetMsg().(type) {
			case *pb.SessionResponse_Snapshot:
				if !established {
					c.cfg.Logger.Info("session established", "control_plane", addr, "epoch", msg.Snapshot.GetEpoch().GetEpoch())
				}
				established = true
				c.connected.Store(true)
				if cert := msg.Snapshot.GetCertificate(); cert != nil && c.cfg.OnCertificate != nil {
					c.cfg.OnCertificate(cert)
				}
				// Purges missed while away first: the node must not serve
				// what they match once it has an epoch to serve with.
				c.apply.ApplyPurges(msg.Snapshot.GetPurges(), c.report)
				if err := c.sendResults(stream); err != nil {
					return established, err
				}
				c.applyEpoch(msg.Snapshot.GetEpoch())
				if ps := msg.Snapshot.GetPolicies(); ps != nil {
					if err := c.applyPolicies(stream, ps); err != nil {
						return established, err
					}
				}
			case *pb.SessionResponse_Certificate:
				if c.cfg.OnCertificate != nil {
					c.cfg.OnCertificate(msg.Certificate)
				}
			case *pb.SessionResponse_Epoch:
				c.applyEpoch(msg.Epoch)
			case *pb.SessionResponse_Purge:
				c.apply.ApplyPurges([]*pb.Purge{msg.Purge}, c.report)
			case *pb.SessionResponse_Policies:
				if err := c.applyPolicies(stream, msg.Policies); err != nil {
					return established, err
				}
			}
		}
	}
}

func (c *Client) applyEpoch(e *pb.RingEpoch) {
	if e == nil || e.GetEpoch() <= c.applied.Load() {
		return
	}
	c.apply.ApplyEpoch(e)
	c.applied.Store(e.GetEpoch())
}

// applyPolicies installs a push and acknowledges it, or reports the refusal.
func (c *Client) applyPolicies(stream pb.NodeService_SessionClient, ps *pb.PolicySet) error {
	ack := &pb.PolicyAck{}
	if err := c.apply.ApplyPolicies(ps); err != nil {
		c.cfg.Logger.Error("refusing policy push; keeping the policies in force", "revision", ps.GetRevision(), "err", err)
		ack.RefusedRevision, ack.Error = ps.GetRevision(), err.Error()
	}
	ack.AppliedRevision = c.apply.PolicyRevision()
	if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PolicyAck{PolicyAck: ack}}); err != nil {
		return recvErr(stream, err)
	}
	return nil
}

// goodbyeWait bounds how long a closing node waits for the control plane to
// acknowledge its goodbye.
const goodbyeWait = 2 * time.Second

// goodbye half-closes the stream, which the control plane takes as a clean
// departure, and waits briefly for it to finish.
func (c *Client) goodbye(stream pb.NodeService_SessionClient, msgs <-chan inbound) error {
	if err := stream.CloseSend(); err != nil {
		return err
	}
	t := time.NewTimer(goodbyeWait)
	defer t.Stop()
	for {
		select {
		case m := <-msgs:
			if m.err != nil {
				return nil
			}
		case <-t.C:
			return errors.New("control plane did not acknowledge the goodbye")
		}
	}
}

// recvErr returns the stream's real error after a failed Send, which only
// reports io.EOF.
func recvErr(stream grpc.ClientStream, err error) error {
	if errors.Is(err, io.EOF) {
		if rerr := stream.RecvMsg(new(pb.SessionResponse)); rerr != nil {
			return rerr
		}
	}
	return err
}
