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
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.rpc.GetRing(ctx, &pb.GetRingRequest{Epoch: n})
	if err != nil {
		return nil, fromStatus(err)
	}
	return resp.GetEpoch(), nil
}

// ListNodes returns every registered node, sorted by id.
func (c *Client) ListNodes(ctx context.Context) (*pb.ListNodesResponse, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.rpc.ListNodes(ctx, &pb.ListNodesRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	return resp, nil
}

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
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

// fromStatus turns a gRPC status error into an error wrapping a sentinel.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if sentinel, ok := codeErrors[st.Code()]; ok {
		return fmt.Errorf("%w: %s", sentinel, st.Message())
	}
	return fmt.Errorf("shardcache: %s: %s", st.Code(), st.Message())
}
