package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/loopback"
)

// Errors the client returns, mapped from the server's gRPC codes; check them
// with errors.Is. The wrapped error keeps the server's message.
var (
	ErrNotFound        = errors.New("shardcache: not found")
	ErrUnauthenticated = errors.New("shardcache: not authenticated (check the admin token)")
	ErrInvalid         = errors.New("shardcache: invalid request")
	ErrUnavailable     = errors.New("shardcache: control plane unavailable")
	ErrConflict        = errors.New("shardcache: conflicting change")
	// ErrNodeUnavailable: the node the control plane had do a call's work
	// (a warm) could not be reached or broke off; the control plane is
	// there.
	ErrNodeUnavailable = errors.New("shardcache: node unavailable")
	// ErrCleartext (an ErrInvalid): New was asked to send the token in
	// plaintext off loopback without Config.InsecurePlaintext.
	ErrCleartext = fmt.Errorf("%w: the admin token would cross the network in cleartext", ErrInvalid)
)

// Config configures a Client.
type Config struct {
	// Address is host:port of any control-plane replica. Required.
	Address string
	// Token is the admin bearer token. Required unless TLS carries a client
	// certificate the control plane trusts (mTLS).
	Token string
	// TLS, when set, connects over TLS (with a client certificate for
	// mTLS). Nil connects in plaintext, which New refuses for an Address
	// off loopback unless InsecurePlaintext is set.
	TLS *tls.Config
	// InsecurePlaintext sends the token in cleartext to a control plane
	// that is not on a loopback address (one started with
	// --insecure-plaintext).
	InsecurePlaintext bool
	// Timeout bounds each call that has no deadline of its own, retries
	// included; a purge call gets its wait on top; a warm, which lasts as
	// long as its transfers, is not bounded by it. Default 10s.
	Timeout time.Duration
	// MaxRetries is how many times a call is repeated after the control
	// plane answered Unavailable (no replica reachable, or etcd behind it
	// failing), always within the call's deadline. A caller's deadline or
	// cancellation is never retried. Default 4; negative disables retries.
	MaxRetries int
	// RetryBackoff is the pause before the first retry; it doubles on each
	// retry up to MaxRetryBackoff, each pause made up to half longer or
	// shorter at random, so that clients that failed together do not retry
	// in step. Default 100ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the pause between retries. Default 2s.
	MaxRetryBackoff time.Duration
}

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = 4
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 100 * time.Millisecond
	}
	if cfg.MaxRetryBackoff == 0 {
		cfg.MaxRetryBackoff = 2 * time.Second
	}
	return cfg
}

// Client calls AdminService. It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	rpc  pb.AdminServiceClient
	cfg  Config // with defaults
}

// New returns a client for cfg. It does not dial: the first call connects.
func New(cfg Config) (*Client, error) {
	if _, _, err := net.SplitHostPort(cfg.Address); err != nil {
		return nil, fmt.Errorf("%w: control plane address %q: %v", ErrInvalid, cfg.Address, err)
	}
	hasClientCert := cfg.TLS != nil && (len(cfg.TLS.Certificates) > 0 || cfg.TLS.GetClientCertificate != nil)
	if cfg.Token == "" && !hasClientCert {
		return nil, fmt.Errorf("%w: no admin token or client certificate given", ErrUnauthenticated)
	}
	if cfg.TLS == nil && !cfg.InsecurePlaintext && !loopback.Only(cfg.Address) {
		return nil, fmt.Errorf("%w: control plane %s is not on a loopback address and no TLS is set", ErrCleartext, cfg.Address)
	}
	if cfg.Timeout < 0 || cfg.RetryBackoff < 0 || cfg.MaxRetryBackoff < 0 {
		return nil, fmt.Errorf("%w: negative timeout or retry backoff", ErrInvalid)
	}
	cfg = cfg.withDefaults()
	bearer := "Bearer " + cfg.Token
	withToken := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if cfg.Token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", bearer)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	withTokenStream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if cfg.Token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", bearer)
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	// Calls are retried by go-grpc-middleware's retry interceptor, while
	// the control plane answers Unavailable, within the call's deadline.
	retries := retry.UnaryClientInterceptor(retry.WithCodes(codes.Unavailable), retry.WithMax(uint(cfg.MaxRetries)+1),
		retry.WithBackoff(backoffOf(cfg)))
	conn, err := grpc.NewClient(cfg.Address,
		grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(retries, withToken),
		grpc.WithChainStreamInterceptor(withTokenStream),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", cfg.Address, err)
	}
	return &Client{conn: conn, rpc: pb.NewAdminServiceClient(conn), cfg: cfg}, nil
}

// backoffOf is the pause before each retry: RetryBackoff doubled on each
// retry up to MaxRetryBackoff, up to half of it longer or shorter at
// random.
func backoffOf(cfg Config) retry.BackoffFunc {
	return retry.BackoffExponentialWithJitterBounded(cfg.RetryBackoff, 0.5, cfg.MaxRetryBackoff)
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// GetRing returns ring epoch n, or the current epoch when n is 0.
func (c *Client) GetRing(ctx context.Context, n uint64) (*pb.RingEpoch, error) {
	resp, err := invoke(ctx, c, c.rpc.GetRing, &pb.GetRingRequest{Epoch: n})
	return resp.GetEpoch(), err
}

// ListNodes returns every registered node, sorted by id: it follows the
// control plane's pages (ListNodesPage) to the last, each page a call of
// its own; the epoch is the first page's.
func (c *Client) ListNodes(ctx context.Context) (*pb.ListNodesResponse, error) {
	var all *pb.ListNodesResponse
	err := followPages("listing nodes", func(token string) (int, string, error) {
		page, err := c.ListNodesPage(ctx, 0, token)
		if err != nil {
			return 0, "", err
		}
		if all == nil {
			all = page
		} else {
			all.Nodes = append(all.Nodes, page.GetNodes()...)
		}
		return len(page.GetNodes()), page.GetNextPageToken(), nil
	})
	if err != nil {
		return nil, err
	}
	all.NextPageToken = ""
	return all, nil
}

// followPages calls read for each page, from the first (token "") to the
// last (whose next token is ""): read returns the page's count and its
// next token. A control plane that gives a token again, or an empty page
// before the last, gets an error rather than a caller looping forever.
func followPages(what string, read func(token string) (n int, next string, err error)) error {
	token := ""
	for {
		n, next, err := read(token)
		if err != nil || next == "" {
			return err
		}
		if next == token || n == 0 {
			return fmt.Errorf("%s: the control plane gave page token %.40q again, or an empty page before the last", what, next)
		}
		token = next
	}
}

// ListNodesPage returns one page of the registered nodes, sorted by id: at
// most size (0 means the control plane's maximum, 500) after the page
// whose NextPageToken is token ("" for the first page).
func (c *Client) ListNodesPage(ctx context.Context, size int32, token string) (*pb.ListNodesResponse, error) {
	return invoke(ctx, c, c.rpc.ListNodes, &pb.ListNodesRequest{PageSize: size, PageToken: token})
}

// Version returns the build of the control-plane replica that answers.
func (c *Client) Version(ctx context.Context) (*pb.GetVersionResponse, error) {
	return invoke(ctx, c, c.rpc.GetVersion, &pb.GetVersionRequest{})
}

// invoke calls rpc with the client's default timeout (unless ctx has a
// deadline), retries it while the control plane is unavailable, and maps a
// failure to the package's errors.
func invoke[Req, Resp any](ctx context.Context, c *Client, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	return invokeHeld(ctx, c, 0, rpc, req)
}

// invokeHeld is invoke for a call the server may hold for up to held before
// it answers; the default timeout is extended by that much.
func invokeHeld[Req, Resp any](ctx context.Context, c *Client, held time.Duration, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout+held)
		defer cancel()
	}
	// The interceptor retries; the call options see each failure, so that
	// the error returned says how often it was tried, and a retry cut off
	// by the deadline does not hide the failure that caused it (such as
	// the control plane naming etcd).
	var last error
	tries := 1
	resp, err := rpc(ctx, req,
		retry.WithRetriable(func(err error) bool {
			if !cutOff(ctx, err) {
				last = err // a failure of its own, not one the deadline caused
			}
			return status.Code(err) == codes.Unavailable
		}),
		retry.WithOnRetryCallback(func(context.Context, uint, error) { tries++ }))
	if err == nil {
		return resp, nil
	}
	if c := status.Code(last); last != nil && cutOff(ctx, err) && c != codes.DeadlineExceeded && c != codes.Canceled {
		err = last
	}
	var zero Resp
	if tries > 1 {
		return zero, fmt.Errorf("%w (tried %d times)", fromStatus(err), tries)
	}
	return zero, fromStatus(err)
}

// cutOffMargin is how close to its deadline a failed call counts as cut
// off by it: the server gives up a little before the client does.
const cutOffMargin = 100 * time.Millisecond

// cutOff reports whether a call failed because ctx ended or was about to.
func cutOff(ctx context.Context, err error) bool {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	deadline, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && time.Until(deadline) < cutOffMargin
}

// codeErrors maps gRPC codes back to the client's sentinels.
var codeErrors = map[codes.Code]error{
	codes.NotFound:         ErrNotFound,
	codes.Unauthenticated:  ErrUnauthenticated,
	codes.PermissionDenied: ErrUnauthenticated,
	codes.InvalidArgument:  ErrInvalid,
	codes.Unavailable:      ErrUnavailable,
	codes.DeadlineExceeded: ErrUnavailable,
	codes.Aborted:          ErrConflict,
	codes.AlreadyExists:    ErrConflict,
}

// rpcError is a failed call: it matches its sentinel with errors.Is and
// keeps the server's status (and its details) for status.FromError.
type rpcError struct {
	sentinel error // nil for codes without a sentinel
	st       *status.Status
}

func (e *rpcError) Error() string {
	if e.sentinel == nil {
		return fmt.Sprintf("shardcache: %s: %s", e.st.Code(), e.st.Message())
	}
	return e.sentinel.Error() + ": " + e.st.Message()
}

func (e *rpcError) Unwrap() error { return e.sentinel }

// GRPCStatus lets status.FromError and status.Code see the server's status.
func (e *rpcError) GRPCStatus() *status.Status { return e.st }

// fromStatus turns a gRPC status error into an error wrapping a sentinel.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	sentinel := codeErrors[st.Code()]
	if st.Code() == codes.Unavailable && nodeUnavailable(st) {
		sentinel = ErrNodeUnavailable
	}
	return &rpcError{sentinel: sentinel, st: st}
}

// nodeUnavailable reports whether st says that a node failed, not the
// control plane (pb.NodeUnavailableReason).
func nodeUnavailable(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == pb.SessionEndDomain && info.GetReason() == pb.NodeUnavailableReason {
			return true
		}
	}
	return false
}
