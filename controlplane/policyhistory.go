package controlplane

import (
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// PolicyHistory returns the kept changes of the policy set, newest first;
// with a name, only those that changed that policy.
func (a *adminService) PolicyHistory(ctx context.Context, req *pb.PolicyHistoryRequest) (*pb.PolicyHistoryResponse, error) {
	entries, rev, err := a.state.policyHistory(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.PolicyHistoryResponse{Revision: rev, MaxEntries: uint32(a.state.historyMax)}
	for _, e := range entries {
		if name := req.GetName(); name != "" {
			var changes []*pb.PolicyChange
			for _, c := range e.GetChanges() {
				if c.GetName() == name {
					changes = append(changes, c)
				}
			}
			if len(changes) == 0 {
				continue
			}
			e.Changes = changes
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// RollbackPolicies restores the set as it was at a revision the history
// reaches back to, as one new change, checked as an apply would be.
func (a *adminService) RollbackPolicies(ctx context.Context, req *pb.RollbackPoliciesRequest) (*pb.RollbackPoliciesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	entries, rev, err := a.state.policyHistory(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	ch, err := rollbackChange(entries, rev, req.GetRevision())
	if err != nil {
		return nil, toStatus(err)
	}
	current, currentRev, _, err := a.state.policies(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	ch.ifRevision = rev
	if currentRev != rev {
		return nil, toStatus(ErrPolicyConflict)
	}
	// The set after the rollback, each restored policy checked against it.
	after := map[string]*pb.CachePolicy{}
	for _, p := range current {
		after[p.GetName()] = p
	}
	for _, name := range ch.deletes {
		delete(after, name)
	}
	for _, p := range ch.puts {
		after[p.GetName()] = p
	}
	var others []*pb.CachePolicy
	for _, p := range after {
		others = append(others, p)
	}
	resp := &pb.RollbackPoliciesResponse{Revision: rev}
	for _, p := range ch.puts {
		v := append(policyViolations(p), overlapViolations(p, others)...)
		if len(v) > 0 {
			return nil, invalidPolicy(p.GetName(), append(v, &errdetails.BadRequest_FieldViolation{Field: "policy",
				Description: "restored by the rollback, it is refused now"}))
		}
	}
	before := map[string]*pb.CachePolicy{}
	for _, p := range current {
		before[p.GetName()] = p
	}
	for _, p := range ch.puts {
		if old := before[p.GetName()]; old == nil || !samePolicy(old, p) {
			resp.Changes = append(resp.Changes, &pb.PolicyChange{Name: p.GetName(), Before: old, After: p})
		}
	}
	for _, name := range ch.deletes {
		resp.Changes = append(resp.Changes, &pb.PolicyChange{Name: name, Before: before[name]})
	}
	if req.GetValidateOnly() || len(resp.Changes) == 0 {
		return resp, nil
	}
	resp.Revision, _, err = a.state.changePolicies(ctx, ch)
	if err != nil {
		return nil, toStatus(err)
	}
	for _, c := range resp.Changes {
		if c.After != nil {
			c.After.Revision = resp.Revision
		}
	}
	return resp, nil
}
