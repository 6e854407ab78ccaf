package controlplane

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/buildinfo"
	"github.com/shardcache/shardcache/sdk/opsclient"
)

// adminService implements AdminService. The current ring is answered from
// the replica's watched view of etcd, and policies from etcd or, when it does
// not answer, from the watched view, so reads keep answering while etcd is
// away; writes go to etcd and fail with Unavailable, naming etcd, within
// writeTimeout when it does not answer.
//
// Every replica watches the same etcd, so reads are the same whichever
// replica is asked (once the watch has delivered the latest change).
type adminService struct {
	pb.UnsafeAdminServiceServer

	state    *state
	hub      *hub
	policies *policyHub
	acks     *ackView
	loads    *loadBook
	replica  string
	// purgesRecorded counts purges by kind; tracer spans their fan-out.
	purgesRecorded *prometheus.CounterVec
	// purgeLimit bounds each caller's purges; purgesThrottled counts those
	// refused by it. caller names who a purge is held against: the client
	// a node relays a PURGE for and proves with its join token, else the
	// caller's address (its /64 for IPv6).
	purgeLimit      *purgeLimiter
	caller          func(context.Context) string
	purgesThrottled prometheus.Counter
	tracer          trace.Tracer
	// warmOps reaches nodes' ops listeners for Warm (warm.go), with warm
	// grants signed with adminToken.
	warmOps    opsclient.Client
	adminToken string
}

var _ pb.AdminServiceServer = (*adminService)(nil)

// Time limits of admin calls on etcd.
const (
	writeTimeout = 5 * time.Second
	readTimeout  = 5 * time.Second
	// policyReadTimeout is short: past it, reads fall back to the watched view.
	policyReadTimeout = time.Second
)

// GetRing returns the current epoch, or a kept older one.
func (a *adminService) GetRing(ctx context.Context, req *pb.GetRingRequest) (*pb.GetRingResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	if req.GetEpoch() == 0 {
		if e := a.hub.epoch(); e != nil {
			return &pb.GetRingResponse{Epoch: e}, nil
		}
		e, _, err := a.state.currentEpoch(ctx)
		if err != nil {
			return nil, toStatus(err)
		}
		if e == nil {
			return nil, status.Error(codes.NotFound, "no ring epoch yet: no node has registered")
		}
		return &pb.GetRingResponse{Epoch: e}, nil
	}
	e, err := a.state.epoch(ctx, req.GetEpoch())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetRingResponse{Epoch: e}, nil
}

// maxNodesPage bounds the nodes of one ListNodes or PolicyStatus answer,
// the page size when the caller names none. A Node is a few hundred bytes
// and a NodePolicyStatus at most about 1.2 KiB, so a page is well inside
// one gRPC message however many nodes register.
const maxNodesPage = 500

// ListNodes returns a page of the registered members, by id, each with
// whether it is in the current epoch, its last load report, and the last
// hello refused for its id. The page token is the last id of the previous
// page, so a page starts where that one stopped even when nodes came or
// went in between.
func (a *adminService) ListNodes(ctx context.Context, req *pb.ListNodesRequest) (*pb.ListNodesResponse, error) {
	size, after, err := nodesPageRequest("ListNodes", req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resp, err := a.nodes(ctx)
	if err != nil {
		return nil, err
	}
	resp.Nodes, resp.NextPageToken = nodesPage(resp.Nodes, size, after)
	return resp, nil
}

// nodesPageRequest reads the page size and token of a request for a page
// of nodes (ListNodes, PolicyStatus, named by rpc): the size, 0 or more
// than maxNodesPage taken as maxNodesPage, and the id the page starts
// after, "" for the first page. A negative size or a token no answer gave
// is an InvalidArgument.
func nodesPageRequest(rpc string, pageSize int32, token string) (size int, after string, err error) {
	size = int(pageSize)
	if size < 0 {
		return 0, "", status.Errorf(codes.InvalidArgument, "page size: %d; give 0 (the default, %d) or more", size, maxNodesPage)
	}
	if size == 0 || size > maxNodesPage {
		size = maxNodesPage
	}
	after, err = decodeNodesPageToken(rpc, token)
	if err != nil {
		return 0, "", err
	}
	return size, after, nil
}

// nodesPage returns the page of at most size of nodes, sorted by id, that
// starts after the id after, and the token of the next page ("" when this
// page is the last).
func nodesPage(nodes []*pb.Node, size int, after string) ([]*pb.Node, string) {
	rest := nodes
	if after != "" {
		i, _ := slices.BinarySearchFunc(rest, after, func(n *pb.Node, id string) int { return strings.Compare(n.GetMember().GetId(), id) })
		for i < len(rest) && rest[i].GetMember().GetId() <= after {
			i++
		}
		rest = rest[i:]
	}
	page := rest[:min(size, len(rest))]
	if len(rest) > size {
		return page, base64.RawURLEncoding.EncodeToString([]byte(page[size-1].GetMember().GetId()))
	}
	return page, ""
}

// maxNodesPageToken bounds a page token: the encoding of a node id, which
// a hello bounds well below this.
const maxNodesPageToken = 1 << 10

// decodeNodesPageToken returns the node id a page token of rpc's answers
// names.
func decodeNodesPageToken(rpc, tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if len(tok) > maxNodesPageToken || err != nil || len(b) == 0 {
		return "", status.Errorf(codes.InvalidArgument, "page token %s: not one a %s answer gave", quoteCut(tok), rpc)
	}
	return string(b), nil
}

// nodes returns every registered member as a Node, sorted by id.
func (a *adminService) nodes(ctx context.Context) (*pb.ListNodesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	members, _, err := a.state.members(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	statuses, err := a.state.statuses(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	cur, _, err := a.state.currentEpoch(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	drained, err := a.state.drained(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	refused, err := a.state.refusals(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	inRing := make(map[string]bool, len(cur.GetMembers()))
	for _, m := range cur.GetMembers() {
		inRing[m.GetId()] = true
	}
	resp := &pb.ListNodesResponse{Epoch: cur.GetEpoch()}
	for _, m := range members {
		if drained[m.GetId()] {
			m.State = pb.MemberState_MEMBER_STATE_DRAINING
		}
		n := &pb.Node{Member: m, InRing: inRing[m.GetId()], LastRefused: refused[m.GetId()]}
		if st, ok := statuses[m.GetId()]; ok {
			n.SessionReplica = st.GetSessionReplica()
			n.ServingEpoch = st.GetServingEpoch()
			n.Load = st.GetLoad()
			n.LastReportAt = st.GetLastReportAt()
			n.PolicyRevision = st.GetPolicyRevision()
			n.PolicyRefusedRevision = st.GetPolicyRefusedRevision()
			n.PolicyError = st.GetPolicyError()
		}
		// Load reports of this replica's sessions are read from its
		// memory; the purge revision from the watermark records.
		if live, ok := a.loads.get(m.GetId()); ok {
			n.ServingEpoch, n.Load, n.LastReportAt = live.GetServingEpoch(), live.GetLoad(), live.GetLastReportAt()
		}
		n.PurgeRevision = a.acks.credited(m.GetId())
		resp.Nodes = append(resp.Nodes, n)
	}
	slices.SortFunc(resp.Nodes, func(x, y *pb.Node) int { return strings.Compare(x.GetMember().GetId(), y.GetMember().GetId()) })
	return resp, nil
}

// DrainNode takes a registered node out of ownership in the next epoch. The
// drain is recorded apart from the node's lease-bound record, so it holds
// across the node's reconnects until UndrainNode.
func (a *adminService) DrainNode(ctx context.Context, req *pb.DrainNodeRequest) (*pb.DrainNodeResponse, error) {
	m, err := a.setDrained(ctx, req.GetNodeId(), true)
	if err != nil {
		return nil, err
	}
	return &pb.DrainNodeResponse{Member: m}, nil
}

// UndrainNode gives a drained node its keys back in the next epoch.
func (a *adminService) UndrainNode(ctx context.Context, req *pb.UndrainNodeRequest) (*pb.UndrainNodeResponse, error) {
	m, err := a.setDrained(ctx, req.GetNodeId(), false)
	if err != nil {
		return nil, err
	}
	return &pb.UndrainNodeResponse{Member: m}, nil
}

func (a *adminService) setDrained(ctx context.Context, id string, drained bool) (*pb.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	members, _, err := a.state.members(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	i := slices.IndexFunc(members, func(m *pb.Member) bool { return m.GetId() == id })
	if i < 0 {
		return nil, toStatus(fmt.Errorf("%w: %s is not registered", ErrNodeNotFound, quoteCut(id)))
	}
	if err := a.state.setDrained(ctx, id, drained); err != nil {
		return nil, toStatus(err)
	}
	m := members[i]
	if drained {
		m.State = pb.MemberState_MEMBER_STATE_DRAINING
	}
	return m, nil
}

// PutPolicy validates a policy field by field, refuses one whose matches
// another policy already claims, and stores it.
func (a *adminService) PutPolicy(ctx context.Context, req *pb.PutPolicyRequest) (*pb.PutPolicyResponse, error) {
	resp, err := a.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: []*pb.CachePolicy{req.GetPolicy()}, ValidateOnly: req.GetValidateOnly()})
	if err != nil {
		return nil, err
	}
	return &pb.PutPolicyResponse{Policy: resp.GetPolicies()[0]}, nil
}

// maxPoliciesPerApply bounds a PutPolicies call (etcd bounds a
// transaction's operations at 128 by default).
const maxPoliciesPerApply = 100

// maxPolicies and maxPolicyBytes bound the policy set, which a snapshot
// carries whole: 500 policies of at most 4 KiB encoded are 2 MiB, half of
// what one gRPC message may hold by default, beside the missed purges'
// 1 MiB and the ring epoch.
const (
	maxPolicies    = 500
	maxPolicyBytes = 4 << 10
)

// PutPolicies validates every policy (each on its own, against those it
// does not replace, and against each other), then writes them all in one
// transaction: a bad one leaves everything as it was.
func (a *adminService) PutPolicies(ctx context.Context, req *pb.PutPoliciesRequest) (*pb.PutPoliciesResponse, error) {
	ps := req.GetPolicies()
	if len(ps) == 0 || len(ps) > maxPoliciesPerApply {
		return nil, status.Errorf(codes.InvalidArgument, "policies: %d given; apply 1 to %d at once", len(ps), maxPoliciesPerApply)
	}
	existing, err := a.listPolicies(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	names := map[string]bool{}
	for _, p := range ps {
		if names[p.GetName()] {
			return nil, status.Errorf(codes.InvalidArgument, "policy %q is given twice", p.GetName())
		}
		names[p.GetName()] = true
	}
	// Each is checked against the policies it does not replace and the
	// other new ones.
	var others []*pb.CachePolicy
	for _, e := range existing.GetPolicies() {
		if !names[e.GetName()] {
			others = append(others, e)
		}
	}
	others = append(others, ps...)
	if len(others) > maxPolicies {
		return nil, status.Errorf(codes.InvalidArgument, "policies: applying these makes %d; a cluster has at most %d", len(others), maxPolicies)
	}
	for _, p := range ps {
		if n := proto.Size(p); n > maxPolicyBytes {
			return nil, invalidPolicy(p.GetName(), []*errdetails.BadRequest_FieldViolation{{Field: "policy",
				Description: fmt.Sprintf("it encodes to %d bytes; a policy has at most %d", n, maxPolicyBytes)}})
		}
		v := policyViolations(p)
		v = append(v, overlapViolations(p, others)...)
		v = append(v, loopViolations(ctx, p, a.hub.epoch())...)
		if len(v) > 0 {
			return nil, invalidPolicy(p.GetName(), v)
		}
	}
	if req.GetValidateOnly() {
		return &pb.PutPoliciesResponse{Policies: ps}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	rev, unchanged, err := a.state.changePolicies(ctx, policyChange{puts: ps, action: "apply"})
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*pb.CachePolicy, len(ps))
	for i, p := range ps {
		out[i] = proto.Clone(p).(*pb.CachePolicy)
		out[i].Revision = rev
		if r, ok := unchanged[p.GetName()]; ok {
			out[i].Revision = r // as it was: nothing written
		}
	}
	return &pb.PutPoliciesResponse{Policies: out}, nil
}

// GetPolicy returns one policy.
func (a *adminService) GetPolicy(ctx context.Context, req *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error) {
	list, err := a.listPolicies(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	for _, p := range list.GetPolicies() {
		if p.GetName() == req.GetName() {
			return &pb.GetPolicyResponse{Policy: p}, nil
		}
	}
	return nil, toStatus(fmt.Errorf("%w: %s", ErrPolicyNotFound, quoteCut(req.GetName())))
}

// ListPolicies returns every policy and the set's revision.
func (a *adminService) ListPolicies(ctx context.Context, _ *pb.ListPoliciesRequest) (*pb.ListPoliciesResponse, error) {
	list, err := a.listPolicies(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return list, nil
}

// listPolicies reads the policies from etcd, so a caller sees its own
// writes; when etcd does not answer within policyReadTimeout it answers from
// the replica's watched view instead.
func (a *adminService) listPolicies(ctx context.Context) (*pb.ListPoliciesResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, policyReadTimeout)
	defer cancel()
	ps, rev, _, err := a.state.policies(rctx)
	if err == nil {
		return &pb.ListPoliciesResponse{Policies: ps, Revision: rev}, nil
	}
	if ps, rev, ok := a.policies.list(); ok {
		return &pb.ListPoliciesResponse{Policies: ps, Revision: rev}, nil
	}
	return nil, err
}

// DeletePolicy removes a policy.
func (a *adminService) DeletePolicy(ctx context.Context, req *pb.DeletePolicyRequest) (*pb.DeletePolicyResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	rev, _, err := a.state.changePolicies(ctx, policyChange{deletes: []string{req.GetName()}, action: "delete"})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeletePolicyResponse{Revision: rev}, nil
}

// PolicyStatus reports, a page of nodes at a time (as ListNodes pages
// them), the revision each registered node runs. Every page carries the
// current revision of the policy set as read for that page.
func (a *adminService) PolicyStatus(ctx context.Context, req *pb.PolicyStatusRequest) (*pb.PolicyStatusResponse, error) {
	size, after, err := nodesPageRequest("PolicyStatus", req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	nodes, err := a.nodes(ctx)
	if err != nil {
		return nil, err
	}
	list, err := a.listPolicies(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.PolicyStatusResponse{Revision: list.GetRevision()}
	page, next := nodesPage(nodes.GetNodes(), size, after)
	for _, n := range page {
		resp.Nodes = append(resp.Nodes, &pb.NodePolicyStatus{NodeId: n.GetMember().GetId(), AppliedRevision: n.GetPolicyRevision(),
			RefusedRevision: n.GetPolicyRefusedRevision(), Error: n.GetPolicyError()})
	}
	resp.NextPageToken = next
	return resp, nil
}

// GetVersion describes this replica's build.
func (a *adminService) GetVersion(context.Context, *pb.GetVersionRequest) (*pb.GetVersionResponse, error) {
	bi := buildinfo.Read()
	return &pb.GetVersionResponse{Version: bi.Version, GoVersion: bi.GoVersion, ReplicaId: a.replica}, nil
}
