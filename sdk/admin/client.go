// Package admin is the Go client of shardcache's AdminService, the API that
// cachectl is built on. It depends on gRPC and the generated protobuf types
// only, so a program that manages a cluster does not pull in etcd or the
// cache node.
//
//	c, err := admin.New(admin.Config{Address: "127.0.0.1:7070", Token: token})
//	if err != nil { ... }
//	defer c.Close()
//	epoch, err := c.GetRing(ctx, 0)
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Errors the client returns, mapped from the server's gRPC codes; check them
// with errors.Is. The wrapped error keeps the server's message.
var (
	ErrNotFound        = errors.New("shardcache: not found")
	ErrUnauthenticated = errors.New("shardcache: not authenticated (check the admin token)")
	ErrInvalid         = errors.New("shardcache: invalid request")
	ErrUnavailable     = errors.New("shardcache: control plane unavailable")
	ErrConflict        = errors.New("shardcache: conflicting change")
)

// Config configures a Client.
type Config struct {
	// Address is host:port of any control-plane replica. Required.
	Address string
	// Token is the admin bearer token. Required unless TLS carries a client
	// certificate the control plane trusts (mTLS).
	Token string
	// TLS, when set, connects over TLS (with a client certificate for
	// mTLS). Nil connects in plaintext.
	TLS *tls.Config
	// Timeout bounds each call that has no deadline of its own. Default 10s.
	Timeout time.Duration
}

// Client calls AdminService. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	rpc     pb.AdminServiceClient
	timeout time.Duration
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
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	bearer := "Bearer " + cfg.Token
	withToken := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if cfg.Token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", bearer)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	conn, err := grpc.NewClient(cfg.Address,
		grpc.WithTransportCredentials(creds),
		grpc.WithUnaryInterceptor(withToken),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", cfg.Address, err)
	}
	return &Client{conn: conn, rpc: pb.NewAdminServiceClient(conn), timeout: cfg.Timeout}, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// GetRing returns ring epoch n, or the current epoch when n is 0.
func (c *Client) GetRing(ctx context.Context, n uint64) (*pb.RingEpoch, error) {
	resp, err := invoke(ctx, c, c.rpc.GetRing, &pb.GetRingRequest{Epoch: n})
	return resp.GetEpoch(), err
}

// ListNodes returns every registered node, sorted by id.
func (c *Client) ListNodes(ctx context.Context) (*pb.ListNodesResponse, error) {
	return invoke(ctx, c, c.rpc.ListNodes, &pb.ListNodesRequest{})
}

// invoke calls rpc with the client's default timeout (unless ctx has a
// deadline) and maps a failure to the package's errors.
func invoke[Req, Resp any](ctx context.Context, c *Client, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := rpc(ctx, req)
	if err != nil {
		var zero Resp
		return zero, fromStatus(err)
	}
	return resp, nil
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
	return &rpcError{sentinel: codeErrors[st.Code()], st: st}
}
