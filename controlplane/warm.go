package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/opsclient"
)

// Waits of the control plane's requests to a node's ops listener. The
// header of a /warm answer comes once the node has its first manifest
// (the node waits up to a minute for each answer's header); after it, the
// warm lasts as long as its transfers, and nothing bounds that but the
// caller.
const (
	opsDialTimeout   = 5 * time.Second
	opsHeaderTimeout = 2 * time.Minute
)

// newWarmClient is how the control plane has a node warm: it calls the
// node's POST /warm itself, once it has authorised the caller (the admin
// interceptor: the admin token, or a client certificate from the client
// CA), on its own authority rather than with the caller's credential (a
// caller by certificate has none to pass on). What it sends is not its
// admin token but a warm grant (opsclient.WarmGrant) signed with it: the
// right to have that one node warm, for warmGrantLife. The node checks it
// with its own admin token. A member advertises its own ops URL, and
// whoever holds only the join token can register one: such a listener
// receives a grant for itself that soon expires, never the admin token. A
// control plane with no admin token (mTLS only) sends none, and a node
// refuses it unless it trusts the caller by other means.
//
// Connections are not kept: a warm is rare and long, and an idle
// connection would outlive the replica's Run.
func newWarmClient() opsclient.Client {
	return opsclient.Client{HTTP: &http.Client{Transport: &http.Transport{
		Proxy:                 nil, // nodes are reached directly, at the URL they advertise
		DialContext:           (&net.Dialer{Timeout: opsDialTimeout}).DialContext,
		ResponseHeaderTimeout: opsHeaderTimeout,
		DisableKeepAlives:     true,
		DisableCompression:    true,
	}}}
}

// warmGrantLife is how long a warm grant is good for: it is checked as the
// node's warm begins, and leaves room for clocks some minutes apart.
const warmGrantLife = 5 * time.Minute

// Warm has one node preheat the request's images (the named one, else the
// first active member with an ops URL) and streams its progress back, a
// step a message, the last with the summary. What is streamed is bounded
// by the node's bounds (opsclient.MaxWarmSteps, MaxWarmLine): a node
// sending more is cut off. A node that cannot be reached or breaks off is
// Unavailable, one that refuses the token PermissionDenied, one that
// refuses the request InvalidArgument, each naming the node.
func (a *adminService) Warm(req *pb.WarmRequest, stream grpc.ServerStreamingServer[pb.WarmResponse]) error {
	ctx := stream.Context()
	m, err := a.warmNode(ctx, req.GetNode())
	if err != nil {
		return err
	}
	ops := a.warmOps
	if a.adminToken != "" {
		ops.Token = opsclient.WarmGrant(a.adminToken, m.GetId(), time.Now().Add(warmGrantLife))
	}
	var sendErr error
	sum, err := ops.Warm(ctx, m, req, func(p *pb.WarmProgress) error {
		sendErr = stream.Send(&pb.WarmResponse{Progress: p})
		return sendErr
	})
	switch {
	case sendErr != nil:
		return sendErr // the caller is gone
	case err != nil && ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, opsclient.ErrRefused):
		return warmStatus(m.GetId(), fmt.Errorf("%w (a warm grant signed with the control plane's admin token)", err))
	case err != nil:
		return warmStatus(m.GetId(), err)
	}
	return stream.Send(&pb.WarmResponse{Progress: &pb.WarmProgress{Summary: sum}})
}

// warmNode is the member named id, or with id empty the first active
// member, by id, that is not drained and advertises an ops URL.
func (a *adminService) warmNode(ctx context.Context, id string) (*pb.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	members, _, err := a.state.members(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	if id != "" {
		i := slices.IndexFunc(members, func(m *pb.Member) bool { return m.GetId() == id })
		switch {
		case i < 0:
			return nil, toStatus(fmt.Errorf("%w: %s is not registered; warm through one of `cachectl nodes`", ErrNodeNotFound, quoteCut(id)))
		case members[i].GetOpsUrl() == "":
			return nil, status.Errorf(codes.InvalidArgument, "node %q advertises no ops URL (--ops-url) to warm through; name another", id)
		}
		return members[i], nil
	}
	drained, err := a.state.drained(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	for _, m := range members {
		if m.GetState() == pb.MemberState_MEMBER_STATE_ACTIVE && !drained[m.GetId()] && m.GetOpsUrl() != "" {
			return m, nil
		}
	}
	return nil, status.Errorf(codes.FailedPrecondition, "no active node with an ops URL to warm through (%d registered)", len(members))
}

// warmStatus is the status of a warm that node failed: its code from the
// code table, its message naming the node; an Unavailable one also says,
// in an ErrorInfo, that the node failed, not the control plane.
func warmStatus(node string, err error) error {
	st := status.Convert(toStatus(err))
	var oe *opsclient.Error
	if !errors.As(err, &oe) || st.Code() != codes.Unavailable {
		return st.Err()
	}
	info := &errdetails.ErrorInfo{Reason: pb.NodeUnavailableReason, Domain: pb.SessionEndDomain, Metadata: map[string]string{"node": node}}
	if d, derr := st.WithDetails(info); derr == nil {
		return d.Err()
	}
	return st.Err()
}
