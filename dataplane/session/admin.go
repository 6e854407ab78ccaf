package session

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Admin is a node's client of the control plane's AdminService, for the
// PURGE requests its clients send: one client per replica address,
// tried in turn.
type Admin struct {
	rpcs  []pb.AdminServiceClient
	conns []*grpc.ClientConn
}

// DialAdmin connects to the control plane's AdminService at each of
// addrs (comma-separated), one client per address; nothing is dialled
// until the first PURGE. A nil tlsConfig dials without TLS.
func DialAdmin(addrs string, tlsConfig *tls.Config) (*Admin, error) {
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	var rpcs []pb.AdminServiceClient
	var conns []*grpc.ClientConn
	for _, addr := range strings.Split(addrs, ",") {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("control plane %s: %w", addr, err)
		}
		conns = append(conns, conn)
		rpcs = append(rpcs, pb.NewAdminServiceClient(conn))
	}
	return &Admin{rpcs: rpcs, conns: conns}, nil
}

// Purge makes call on each control-plane address in turn until one is
// reachable.
func (a *Admin) Purge(ctx context.Context, call func(context.Context, pb.AdminServiceClient) (*pb.PurgeStatus, error)) (*pb.PurgeStatus, error) {
	var err error
	for _, c := range a.rpcs {
		var st *pb.PurgeStatus
		if st, err = call(ctx, c); status.Code(err) != codes.Unavailable {
			return st, err
		}
	}
	return nil, err
}

// Close closes the connections.
func (a *Admin) Close() {
	for _, c := range a.conns {
		c.Close()
	}
}
