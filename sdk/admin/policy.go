package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// FieldError is one refused field of a policy.
type FieldError struct {
	Field, Description string
}

// ValidationError is a refused policy with every bad field; it wraps
// ErrInvalid.
type ValidationError struct {
	Policy string
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Description
	}
	return fmt.Sprintf("policy %q is invalid: %s", e.Policy, strings.Join(parts, "; "))
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// validationError extracts the field violations of a refused policy.
func validationError(name string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var ve *ValidationError
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			ve = &ValidationError{Policy: name}
			for _, v := range d.GetFieldViolations() {
				ve.Fields = append(ve.Fields, FieldError{Field: v.GetField(), Description: v.GetDescription()})
			}
		case *errdetails.ResourceInfo:
			if d.GetResourceType() == "policy" {
				name = d.GetResourceName() // the policy of several that is refused
			}
		}
	}
	if ve != nil {
		ve.Policy = name
		return ve
	}
	return fromStatus(err)
}

// PutPolicy creates or replaces a policy; with validateOnly it only checks
// it. A refused policy returns a *ValidationError naming every bad field.
func (c *Client) PutPolicy(ctx context.Context, p *pb.CachePolicy, validateOnly bool) (*pb.CachePolicy, error) {
	resp, err := invoke(ctx, c, c.rpc.PutPolicy, &pb.PutPolicyRequest{Policy: p, ValidateOnly: validateOnly})
	if err != nil {
		return nil, validationError(p.GetName(), err)
	}
	return resp.GetPolicy(), nil
}

// PutPolicies creates or replaces several policies at once: all or none.
// A refused one returns a *ValidationError naming it and every bad field,
// and nothing is changed. With validateOnly it only checks them.
func (c *Client) PutPolicies(ctx context.Context, ps []*pb.CachePolicy, validateOnly bool) ([]*pb.CachePolicy, error) {
	resp, err := invoke(ctx, c, c.rpc.PutPolicies, &pb.PutPoliciesRequest{Policies: ps, ValidateOnly: validateOnly})
	if err != nil {
		return nil, validationError("", err)
	}
	return resp.GetPolicies(), nil
}

// GetPolicy returns one policy; ErrNotFound when there is none by that name.
func (c *Client) GetPolicy(ctx context.Context, name string) (*pb.CachePolicy, error) {
	resp, err := invoke(ctx, c, c.rpc.GetPolicy, &pb.GetPolicyRequest{Name: name})
	return resp.GetPolicy(), err
}

// ListPolicies returns every policy and the revision of the set.
func (c *Client) ListPolicies(ctx context.Context) (*pb.ListPoliciesResponse, error) {
	return invoke(ctx, c, c.rpc.ListPolicies, &pb.ListPoliciesRequest{})
}

// DeletePolicy removes a policy and returns the set's new revision.
func (c *Client) DeletePolicy(ctx context.Context, name string) (int64, error) {
	resp, err := invoke(ctx, c, c.rpc.DeletePolicy, &pb.DeletePolicyRequest{Name: name})
	return resp.GetRevision(), err
}

// policyStatusReads bounds how often PolicyStatus starts the pages over
// because the policy set changed while it read them.
const policyStatusReads = 3

// PolicyStatus returns the revision each node runs, every node sorted by
// id: it follows the control plane's pages (PolicyStatusPage) to the last,
// each page a call of its own. Every node is compared with one revision of
// the policy set: should a page carry another revision than the first, the
// pages are read again from the first, at most policyStatusReads times in
// all, after which it returns an error.
func (c *Client) PolicyStatus(ctx context.Context) (*pb.PolicyStatusResponse, error) {
	for range policyStatusReads {
		all, err := c.policyStatusPages(ctx)
		if all != nil || err != nil {
			return all, err
		}
	}
	return nil, fmt.Errorf("policy status: the policy set changed while its pages were read, %d times; try again", policyStatusReads)
}

// policyStatusPages reads every page of PolicyStatus, or returns nil and
// no error if the revision of the policy set changed between pages.
func (c *Client) policyStatusPages(ctx context.Context) (*pb.PolicyStatusResponse, error) {
	var all *pb.PolicyStatusResponse
	err := followPages("policy status", func(token string) (int, string, error) {
		page, err := c.PolicyStatusPage(ctx, 0, token)
		switch {
		case err != nil:
			return 0, "", err
		case all == nil:
			all = page
		case page.GetRevision() != all.GetRevision():
			return 0, "", errRevisionChanged
		default:
			all.Nodes = append(all.Nodes, page.GetNodes()...)
		}
		return len(page.GetNodes()), page.GetNextPageToken(), nil
	})
	if errors.Is(err, errRevisionChanged) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	all.NextPageToken = ""
	return all, nil
}

// errRevisionChanged ends a reading of PolicyStatus's pages whose policy
// set changed between them.
var errRevisionChanged = errors.New("the policy set changed between pages")

// PolicyStatusPage returns one page of the nodes' policy state, sorted by
// node id, with the revision of the policy set as the page was read: at
// most size nodes (0 means the control plane's maximum, 500) after the
// page whose NextPageToken is token ("" for the first page).
func (c *Client) PolicyStatusPage(ctx context.Context, size int32, token string) (*pb.PolicyStatusResponse, error) {
	return invoke(ctx, c, c.rpc.PolicyStatus, &pb.PolicyStatusRequest{PageSize: size, PageToken: token})
}

// DrainNode takes a node out of ownership in the next epoch.
func (c *Client) DrainNode(ctx context.Context, id string) (*pb.Member, error) {
	resp, err := invoke(ctx, c, c.rpc.DrainNode, &pb.DrainNodeRequest{NodeId: id})
	return resp.GetMember(), err
}

// UndrainNode gives a drained node its keys back in the next epoch.
func (c *Client) UndrainNode(ctx context.Context, id string) (*pb.Member, error) {
	resp, err := invoke(ctx, c, c.rpc.UndrainNode, &pb.UndrainNodeRequest{NodeId: id})
	return resp.GetMember(), err
}

// PolicyHistory returns the recorded changes of the policy set, newest
// first (only those of the policy name when it is not empty).
func (c *Client) PolicyHistory(ctx context.Context, name string) (*pb.PolicyHistoryResponse, error) {
	return invoke(ctx, c, c.rpc.PolicyHistory, &pb.PolicyHistoryRequest{Name: name})
}

// RollbackPolicies restores the policy set as it was at revision, as one
// new change; with validateOnly it only says what would change.
// ErrNotFound when the history does not reach back that far.
func (c *Client) RollbackPolicies(ctx context.Context, revision int64, validateOnly bool) (*pb.RollbackPoliciesResponse, error) {
	resp, err := invoke(ctx, c, c.rpc.RollbackPolicies, &pb.RollbackPoliciesRequest{Revision: revision, ValidateOnly: validateOnly})
	if err != nil {
		return nil, validationError("", err)
	}
	return resp, nil
}
