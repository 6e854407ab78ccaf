package controlplane

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

var (
	validPolicyName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	validHost       = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
	validToken      = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Limits a policy must stay within, beyond those of the grammar (sdk/policy).
const (
	maxReplication = 5
	maxVariants    = 1024
	maxVaryBy      = 8
)

// policyViolations checks one policy on its own and returns one violation
// per bad field, named by its proto field path.
func policyViolations(p *pb.CachePolicy) []*errdetails.BadRequest_FieldViolation {
	var v []*errdetails.BadRequest_FieldViolation
	bad := func(field, format string, args ...any) {
		v = append(v, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	if p == nil {
		bad("policy", "no policy given")
		return v
	}
	if !validPolicyName.MatchString(p.GetName()) {
		bad("name", "%q: use 1 to 63 lower-case letters, digits, '.', '_' or '-'", p.GetName())
	}
	for i, h := range p.GetHosts() {
		if !validHost.MatchString(h) {
			bad(fmt.Sprintf("hosts[%d]", i), "%q is not a lower-case host name (no scheme, no port; *.example.com allowed)", h)
		}
	}
	if pp := p.GetPathPrefix(); pp != "" && !strings.HasPrefix(pp, "/") {
		bad("path_prefix", "%q must start with /", pp)
	}
	for i, o := range p.GetOriginUrls() {
		u, err := url.Parse(o)
		switch {
		case err != nil:
			bad(fmt.Sprintf("origin_urls[%d]", i), "%q: %v", o, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad(fmt.Sprintf("origin_urls[%d]", i), "%q: scheme must be http or https", o)
		case u.Host == "" || u.Hostname() == "":
			bad(fmt.Sprintf("origin_urls[%d]", i), "%q has no host", o)
		case u.Port() != "" && !validPort(u.Port()):
			bad(fmt.Sprintf("origin_urls[%d]", i), "%q: bad port", o)
		}
	}
	if t := p.GetKeyTemplate(); t != "" {
		if err := policy.CheckKeyTemplate(t); err != nil {
			bad("key_template", "%q: %v", t, err)
		}
	}
	if _, ok := pb.CacheMode_name[int32(p.GetMode())]; !ok {
		bad("mode", "unknown mode %d", p.GetMode())
	}
	for _, d := range []struct {
		field string
		d     *durationpb.Duration
	}{
		{"default_ttl", p.GetDefaultTtl()}, {"stale_while_revalidate", p.GetStaleWhileRevalidate()}, {"stale_if_error", p.GetStaleIfError()},
		{"collapse_timeout", p.GetCollapseTimeout()}, {"origin_timeout", p.GetOriginTimeout()}, {"relay_timeout", p.GetRelayTimeout()},
	} {
		if d.d.GetSeconds() < 0 || d.d.GetNanos() < 0 {
			bad(d.field, "must not be negative")
		}
	}
	for i, st := range p.GetStatusTtls() {
		if !validStatusRange(st.GetStatusFrom(), st.GetStatusTo()) {
			bad(fmt.Sprintf("status_ttls[%d]", i), "status range %d-%d: want 100 <= from <= to <= 599", st.GetStatusFrom(), st.GetStatusTo())
		}
		if st.GetTtl().GetSeconds() < 0 || st.GetTtl().GetNanos() < 0 {
			bad(fmt.Sprintf("status_ttls[%d].ttl", i), "must not be negative")
		}
	}
	for i, r := range p.GetExcludedStatuses() {
		if !validStatusRange(r.GetFrom(), r.GetTo()) {
			bad(fmt.Sprintf("excluded_statuses[%d]", i), "status range %d-%d: want 100 <= from <= to <= 599", r.GetFrom(), r.GetTo())
		}
	}
	if n := len(p.GetHeuristicStatuses()); n > 100 {
		bad("heuristic_statuses", "%d statuses: at most 100", n)
	}
	for i, st := range p.GetHeuristicStatuses() {
		if st < 200 || st > 599 {
			bad(fmt.Sprintf("heuristic_statuses[%d]", i), "status %d: want 200 to 599", st)
		}
	}
	if p.GetAuthorizeEveryRequest() && p.CacheAuthorized != nil && !p.GetCacheAuthorized() {
		bad("authorize_every_request", "not with cache_authorized false, which sends every request with Authorization to the origin uncached")
	}
	if p.GetAuthorizeEveryRequest() && p.GetStaleIfDisconnected() {
		bad("stale_if_disconnected", "not with authorize_every_request, which serves nothing stored that the origin has not just authorised")
	}
	if h := p.GetOriginHost(); h != "" && h != "origin" && h != "client" {
		bad("origin_host", "%q: want \"origin\" (the origin's own Host) or \"client\" (the client's)", h)
	}
	if n := len(p.GetVaryBy()); n > maxVaryBy {
		bad("vary_by", "%d fields: at most %d", n, maxVaryBy)
	}
	for i, f := range p.GetVaryBy() {
		if !validToken.MatchString(f) {
			bad(fmt.Sprintf("vary_by[%d]", i), "%q is not a field name", f)
		}
	}
	switch s := p.GetSliceSize(); {
	case s < 0 || (s > 0 && s < policy.MinSliceSize) || s > policy.MaxSliceSize:
		bad("slice_size", "%d: want 0 (whole objects) or %d to %d bytes", s, policy.MinSliceSize, policy.MaxSliceSize)
	case s > 0 && p.GetMaxObjectSize() > 0 && s > p.GetMaxObjectSize():
		// A slice larger than the largest object stored would never be stored.
		bad("slice_size", "%d: larger than max_object_size %d, so no slice would be stored", s, p.GetMaxObjectSize())
	case s > 0 && p.GetAuthorizeEveryRequest():
		bad("authorize_every_request", "not with slice_size: slices are not checked one by one")
	case s > 0 && p.GetPartialContent():
		bad("partial_content", "not with slice_size: a sliced object is fetched and stored by ranges already")
	}
	if p.GetMaxObjectSize() < 0 {
		bad("max_object_size", "must not be negative")
	}
	if rf := p.GetReplicationFactor(); rf > maxReplication {
		bad("replication_factor", "%d: at most %d", rf, maxReplication)
	}
	if mv := p.GetMaxVariants(); mv > maxVariants {
		bad("max_variants", "%d: at most %d", mv, maxVariants)
	}
	for i, r := range p.GetBypass() {
		field := fmt.Sprintf("bypass[%d]", i)
		if len(r.GetMethods())+len(r.GetHeaders())+len(r.GetCookies())+len(r.GetPathPatterns()) == 0 {
			bad(field, "an empty rule would bypass every request; use mode BYPASS for that")
		}
		for _, m := range r.GetMethods() {
			if !validToken.MatchString(m) || strings.ToUpper(m) != m {
				bad(field+".methods", "%q is not an upper-case method", m)
			}
		}
		for _, h := range r.GetHeaders() {
			if !validToken.MatchString(h) {
				bad(field+".headers", "%q is not a header name", h)
			}
		}
		for _, c := range r.GetCookies() {
			if !validToken.MatchString(c) {
				bad(field+".cookies", "%q is not a cookie name", c)
			}
		}
		for _, pat := range r.GetPathPatterns() {
			if _, err := path.Match(pat, "/"); err != nil || !strings.HasPrefix(pat, "/") {
				bad(field+".path_patterns", "%q is not a path pattern starting with / (path.Match syntax)", pat)
			}
		}
	}
	// A relay or origin request that gives up before the collapsing wait
	// ends turns one slow object into a stream of duplicate fetches.
	collapse := p.GetCollapseTimeout().AsDuration()
	if p.GetCollapseTimeout() != nil {
		if p.GetOriginTimeout() != nil && p.GetOriginTimeout().AsDuration() < collapse {
			bad("origin_timeout", "%s is shorter than collapse_timeout %s", p.GetOriginTimeout().AsDuration(), collapse)
		}
		if p.GetRelayTimeout() != nil && p.GetRelayTimeout().AsDuration() < collapse {
			bad("relay_timeout", "%s is shorter than collapse_timeout %s", p.GetRelayTimeout().AsDuration(), collapse)
		}
	}
	if p.GetRelayTimeout() != nil && p.GetOriginTimeout() != nil && p.GetRelayTimeout().AsDuration() <= p.GetOriginTimeout().AsDuration() {
		bad("relay_timeout", "%s must exceed origin_timeout %s: the owner may be waiting on the origin", p.GetRelayTimeout().AsDuration(), p.GetOriginTimeout().AsDuration())
	}
	// Last, the grammar nodes compile with: what they would refuse is
	// refused here, before it reaches etcd.
	if len(v) == 0 {
		if _, err := policy.Compile(p); err != nil {
			bad("policy", "nodes would refuse it: %v", err)
		}
	}
	return v
}

func validPort(p string) bool {
	_, err := net.LookupPort("tcp", p)
	return err == nil
}

func validStatusRange(from, to uint32) bool { return from >= 100 && from <= to && to <= 599 }

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
