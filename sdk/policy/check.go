package policy

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Violation is one field of a policy that breaks the grammar: the field's
// proto path (hosts[2], bypass[0].methods) and what is wrong with it.
type Violation struct {
	Field, Description string
}

func (v Violation) String() string { return v.Field + ": " + v.Description }

// Limits a policy must stay within.
const (
	MaxReplication = 5
	MaxVariants    = 1024
	MaxVaryBy      = 8
)

var (
	validPolicyName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	validHost       = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
)

// violations collects what a policy breaks.
type violations []Violation

func (v *violations) bad(field, format string, args ...any) {
	*v = append(*v, Violation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// Check returns one violation per field of p that breaks the grammar,
// none for a policy every node runs. The control plane refuses a policy
// Check refuses; Compile runs it first.
func Check(p *pb.CachePolicy) []Violation {
	var v violations
	if p == nil {
		v.bad("policy", "no policy given")
		return v
	}
	checkMatch(p, &v)
	checkFreshness(p, &v)
	checkRequests(p, &v)
	checkTimeouts(p, &v)
	checkRegistries(p, &v)
	return v
}

// checkMatch: the name, what the policy matches, where it fetches and how
// it keys.
func checkMatch(p *pb.CachePolicy, v *violations) {
	if !validPolicyName.MatchString(p.GetName()) {
		v.bad("name", "%q: use 1 to 63 lower-case letters, digits, '.', '_' or '-'", p.GetName())
	}
	for i, h := range p.GetHosts() {
		if !validHost.MatchString(h) {
			v.bad(fmt.Sprintf("hosts[%d]", i), "%q is not a lower-case host name (no scheme, no port; *.example.com allowed)", h)
		}
	}
	if pp := p.GetPathPrefix(); pp != "" && !strings.HasPrefix(pp, "/") {
		v.bad("path_prefix", "%q must start with /", pp)
	}
	for i, o := range p.GetOriginUrls() {
		field := fmt.Sprintf("origin_urls[%d]", i)
		u, err := url.Parse(o)
		switch {
		case err != nil:
			v.bad(field, "%q: %v", o, err)
		case u.Scheme != "http" && u.Scheme != "https":
			v.bad(field, "%q: scheme must be http or https", o)
		case u.Host == "" || u.Hostname() == "":
			v.bad(field, "%q has no host", o)
		case u.Port() != "" && !validPort(u.Port()):
			v.bad(field, "%q: bad port", o)
		}
	}
	if t := p.GetKeyTemplate(); t != "" {
		if err := CheckKeyTemplate(t); err != nil {
			v.bad("key_template", "%q: %v", t, err)
		}
	}
	if _, ok := pb.CacheMode_name[int32(p.GetMode())]; !ok {
		v.bad("mode", "unknown mode %d", p.GetMode())
	}
	if h := p.GetOriginHost(); h != "" && h != "origin" && h != "client" {
		v.bad("origin_host", "%q: want \"origin\" (the origin's own Host) or \"client\" (the client's)", h)
	}
	if rf := p.GetReplicationFactor(); rf > MaxReplication {
		v.bad("replication_factor", "%d: at most %d", rf, MaxReplication)
	}
}

// checkFreshness: what is stored, for how long, and which settings
// exclude each other.
func checkFreshness(p *pb.CachePolicy, v *violations) {
	for i, st := range p.GetStatusTtls() {
		if !validStatusRange(st.GetStatusFrom(), st.GetStatusTo()) {
			v.bad(fmt.Sprintf("status_ttls[%d]", i), "status range %d-%d: want 100 <= from <= to <= 599", st.GetStatusFrom(), st.GetStatusTo())
		}
		if negative(st.GetTtl()) {
			v.bad(fmt.Sprintf("status_ttls[%d].ttl", i), "must not be negative")
		}
	}
	for i, r := range p.GetExcludedStatuses() {
		if !validStatusRange(r.GetFrom(), r.GetTo()) {
			v.bad(fmt.Sprintf("excluded_statuses[%d]", i), "status range %d-%d: want 100 <= from <= to <= 599", r.GetFrom(), r.GetTo())
		}
	}
	if n := len(p.GetHeuristicStatuses()); n > 100 {
		v.bad("heuristic_statuses", "%d statuses: at most 100", n)
	}
	for i, st := range p.GetHeuristicStatuses() {
		if st < 200 || st > 599 {
			v.bad(fmt.Sprintf("heuristic_statuses[%d]", i), "status %d: want 200 to 599", st)
		}
	}
	if p.GetAuthorizeEveryRequest() && p.CacheAuthorized != nil && !p.GetCacheAuthorized() {
		v.bad("authorize_every_request", "not with cache_authorized false, which sends every request with Authorization to the origin uncached")
	}
	if p.GetAuthorizeEveryRequest() && p.GetStaleIfDisconnected() {
		v.bad("stale_if_disconnected", "not with authorize_every_request, which serves nothing stored that the origin has not just authorised")
	}
	if f := p.GetTargetedCacheControl(); f != "" && (!validFieldName(f) || strings.EqualFold(f, "Cache-Control") || strings.EqualFold(f, "CDN-Cache-Control")) {
		v.bad("targeted_cache_control", "%q: want a header field name of the cluster's own, not Cache-Control or CDN-Cache-Control (obeyed anyway)", f)
	}
	switch s := p.GetSliceSize(); {
	case s < 0 || (s > 0 && s < MinSliceSize) || s > MaxSliceSize:
		v.bad("slice_size", "%d: want 0 (whole objects) or %d to %d bytes", s, MinSliceSize, MaxSliceSize)
	case s > 0 && p.GetMaxObjectSize() > 0 && s > p.GetMaxObjectSize():
		// A slice larger than the largest object stored would never be stored.
		v.bad("slice_size", "%d: larger than max_object_size %d, so no slice would be stored", s, p.GetMaxObjectSize())
	case s > 0 && p.GetAuthorizeEveryRequest():
		v.bad("authorize_every_request", "not with slice_size: slices are not checked one by one")
	case s > 0 && p.GetPartialContent():
		v.bad("partial_content", "not with slice_size: a sliced object is fetched and stored by ranges already")
	}
	if p.GetMaxObjectSize() < 0 {
		v.bad("max_object_size", "must not be negative")
	}
	if mv := p.GetMaxVariants(); mv > MaxVariants {
		v.bad("max_variants", "%d: at most %d", mv, MaxVariants)
	}
}

// checkRequests: the request fields a policy varies by or bypasses on.
func checkRequests(p *pb.CachePolicy, v *violations) {
	if n := len(p.GetVaryBy()); n > MaxVaryBy {
		v.bad("vary_by", "%d fields: at most %d", n, MaxVaryBy)
	}
	for i, f := range p.GetVaryBy() {
		if !validFieldName(f) {
			v.bad(fmt.Sprintf("vary_by[%d]", i), "%q is not a field name", f)
		}
	}
	for i, r := range p.GetBypass() {
		field := fmt.Sprintf("bypass[%d]", i)
		if len(r.GetMethods())+len(r.GetHeaders())+len(r.GetCookies())+len(r.GetPathPatterns()) == 0 {
			v.bad(field, "an empty rule would bypass every request; use mode BYPASS for that")
		}
		for _, m := range r.GetMethods() {
			if !validFieldName(m) || strings.ToUpper(m) != m {
				v.bad(field+".methods", "%q is not an upper-case method", m)
			}
		}
		for _, h := range r.GetHeaders() {
			if !validFieldName(h) {
				v.bad(field+".headers", "%q is not a header name", h)
			}
		}
		for _, c := range r.GetCookies() {
			if !validFieldName(c) {
				v.bad(field+".cookies", "%q is not a cookie name", c)
			}
		}
		for _, pat := range r.GetPathPatterns() {
			if _, err := path.Match(pat, "/"); err != nil || !strings.HasPrefix(pat, "/") {
				v.bad(field+".path_patterns", "%q is not a path pattern starting with / (path.Match syntax)", pat)
			}
		}
	}
}

// checkTimeouts: no duration is negative, and the waits nest. A relay or
// origin request that gives up before the collapsing wait ends turns one
// slow object into a stream of duplicate fetches.
func checkTimeouts(p *pb.CachePolicy, v *violations) {
	for _, d := range []struct {
		field string
		d     *durationpb.Duration
	}{
		{"default_ttl", p.GetDefaultTtl()}, {"stale_while_revalidate", p.GetStaleWhileRevalidate()}, {"stale_if_error", p.GetStaleIfError()},
		{"collapse_timeout", p.GetCollapseTimeout()}, {"origin_timeout", p.GetOriginTimeout()}, {"relay_timeout", p.GetRelayTimeout()},
	} {
		if negative(d.d) {
			v.bad(d.field, "must not be negative")
		}
	}
	collapse, origin, relay := p.GetCollapseTimeout(), p.GetOriginTimeout(), p.GetRelayTimeout()
	if collapse != nil {
		if origin != nil && origin.AsDuration() < collapse.AsDuration() {
			v.bad("origin_timeout", "%s is shorter than collapse_timeout %s", origin.AsDuration(), collapse.AsDuration())
		}
		if relay != nil && relay.AsDuration() < collapse.AsDuration() {
			v.bad("relay_timeout", "%s is shorter than collapse_timeout %s", relay.AsDuration(), collapse.AsDuration())
		}
	}
	if relay != nil && origin != nil && relay.AsDuration() <= origin.AsDuration() {
		v.bad("relay_timeout", "%s must exceed origin_timeout %s: the owner may be waiting on the origin", relay.AsDuration(), origin.AsDuration())
	}
}

func negative(d *durationpb.Duration) bool { return d.GetSeconds() < 0 || d.GetNanos() < 0 }

func validPort(p string) bool {
	_, err := net.LookupPort("tcp", p)
	return err == nil
}

func validStatusRange(from, to uint32) bool { return from >= 100 && from <= to && to <= 599 }
