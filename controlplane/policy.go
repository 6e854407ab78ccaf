package controlplane

import (
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// policyViolations checks one policy on its own, by the grammar nodes
// compile with (sdk/policy), and returns one violation per bad field,
// named by its proto field path.
func policyViolations(p *pb.CachePolicy) []*errdetails.BadRequest_FieldViolation {
	var v []*errdetails.BadRequest_FieldViolation
	for _, f := range policy.Check(p) {
		v = append(v, &errdetails.BadRequest_FieldViolation{Field: f.Field, Description: f.Description})
	}
	return v
}

// matchKeys are the (host, path prefix) pairs a policy claims; two policies
// claiming one pair would make matching ambiguous.
func matchKeys(p *pb.CachePolicy) []string {
	hosts := p.GetHosts()
	if len(hosts) == 0 {
		hosts = []string{"*"}
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h + " " + p.GetPathPrefix()
	}
	return out
}

// overlapViolations refuses a policy whose matches another policy already claims.
func overlapViolations(p *pb.CachePolicy, existing []*pb.CachePolicy) []*errdetails.BadRequest_FieldViolation {
	claimed := map[string]string{}
	for _, e := range existing {
		if e.GetName() == p.GetName() {
			continue
		}
		for _, k := range matchKeys(e) {
			claimed[k] = e.GetName()
		}
	}
	var v []*errdetails.BadRequest_FieldViolation
	for _, k := range matchKeys(p) {
		if other, ok := claimed[k]; ok {
			host, prefix, _ := strings.Cut(k, " ")
			v = append(v, &errdetails.BadRequest_FieldViolation{Field: "hosts",
				Description: fmt.Sprintf("host %s with path prefix %q is already matched by policy %q", host, prefix, other)})
		}
	}
	return v
}

// invalidPolicy is the InvalidArgument status listing every violation.
func invalidPolicy(name string, v []*errdetails.BadRequest_FieldViolation) error {
	msgs := make([]string, len(v))
	for i, f := range v {
		msgs[i] = f.GetField() + ": " + f.GetDescription()
	}
	st := status.New(codes.InvalidArgument, fmt.Sprintf("policy %q is invalid: %s", name, strings.Join(msgs, "; ")))
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: v},
		&errdetails.ResourceInfo{ResourceType: "policy", ResourceName: name}); err == nil {
		st = d
	}
	return st.Err()
}
