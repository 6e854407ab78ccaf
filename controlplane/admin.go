package controlplane

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// adminService implements AdminService. Every replica answers from etcd, so
// reads are the same whichever replica is asked.
type adminService struct {
	pb.UnsafeAdminServiceServer

	state *state
	hub   *hub
}

var _ pb.AdminServiceServer = (*adminService)(nil)

// GetRing returns the current epoch, or a kept older one.
func (a *adminService) GetRing(ctx context.Context, req *pb.GetRingRequest) (*pb.GetRingResponse, error) {
	if req.GetEpoch() == 0 {
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

// ListNodes returns every registered member, whether it is in the current
// epoch, and its last load report.
func (a *adminService) ListNodes(ctx context.Context, _ *pb.ListNodesRequest) (*pb.ListNodesResponse, error) {
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
	inRing := make(map[string]bool, len(cur.GetMembers()))
	for _, m := range cur.GetMembers() {
		inRing[m.GetId()] = true
	}
	resp := &pb.ListNodesResponse{Epoch: cur.GetEpoch()}
	for _, m := range members {
		n := &pb.Node{Member: m, InRing: inRing[m.GetId()]}
		if st, ok := statuses[m.GetId()]; ok {
			n.SessionReplica = st.GetSessionReplica()
			n.ServingEpoch = st.GetServingEpoch()
			n.Load = st.GetLoad()
			n.LastReportAt = st.GetLastReportAt()
		}
		resp.Nodes = append(resp.Nodes, n)
	}
	slices.SortFunc(resp.Nodes, func(x, y *pb.Node) int { return strings.Compare(x.GetMember().GetId(), y.GetMember().GetId()) })
	return resp, nil
}
