// Package policy is the one grammar of shardcache's cache policies and
// their compiled form: which policy a request falls under (by host and
// longest path prefix), how its cache key is built, whether it bypasses the
// cache, and the freshness overrides of its responses. The control plane
// refuses a policy that Compile refuses, so every policy it accepts is one
// every node runs; nodes compile pushed sets with it, and cachectl locate
// builds keys with it as nodes do. A Set is immutable; a node swaps whole
// sets. It imports only the wire API (proto) and the standard library.
package policy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/redact"
)

// DefaultKeyTemplate is the key of requests no template overrides.
const DefaultKeyTemplate = "$scheme$host$request_uri"

// Policy is one compiled policy. The zero Policy (used when none matches)
// caches sharded with the default key.
type Policy struct {
	Name       string
	Mode       pb.CacheMode
	Origins    []*url.URL // tried in order; empty: the node's default origin
	DefaultTTL time.Duration
	MaxObject  int64 // 0: the node's default
	// SliceSize, when positive, caches objects as slices of this many
	// bytes, each keyed and owned separately; 0 keeps objects whole.
	SliceSize int64
	// ReplicationFactor is the number of owners of a hot key (default 2).
	ReplicationFactor int
	// HotThreshold is requests per minute above which a key is hot; 0: the node's.
	HotThreshold int
	// Compress stores textual responses zstd-coded (default true).
	Compress bool
	// StaleWhileRevalidate and StaleIfError are how long past freshness a
	// response may be served while revalidated in the background, or when
	// the origin fails, where the response does not say.
	StaleWhileRevalidate, StaleIfError time.Duration
	// StaleIfDisconnected (default true) serves a stored response however
	// stale when the origin closes the connection without answering,
	// unless the response forbids it (see the CachePolicy field).
	StaleIfDisconnected bool
	// CacheAuthorized (default true) lets requests with Authorization
	// through the cache, as RFC 9111 3.5 allows; StorePrivate and
	// StoreSetCookie relax the default refusals: see the CachePolicy
	// fields of the same names.
	CacheAuthorized, StorePrivate, StoreSetCookie bool
	// PartialContent stores 206 answers to Range requests as parts of
	// their object (see the CachePolicy field).
	PartialContent bool
	// RegistryAware (default true) stores container registry manifests as
	// varying on Accept; VaryBy are fields every response varies on.
	RegistryAware bool
	VaryBy        []string
	// ClientHost sends the origin the client's Host rather than its own.
	ClientHost bool
	// AuthorizeEach checks every use of a stored response with the origin,
	// with the client's credentials (see the CachePolicy field).
	AuthorizeEach bool
	// CacheStatusKey shows the cache key in Cache-Status.
	CacheStatusKey bool
	// MaxVariants bounds the Vary variants kept per URL; 0: the node's.
	MaxVariants int
	// OriginTimeout bounds an origin request and CollapseTimeout a wait on
	// another request's fill; 0: the node's.
	OriginTimeout, CollapseTimeout time.Duration
	// RelayTimeout bounds a relayed request to the owner; 0: the node's.
	RelayTimeout time.Duration
	// Targeted are the cluster's own targeted cache-control fields (RFC
	// 9213), canonical, obeyed before CDN-Cache-Control; none when empty.
	Targeted []string
	// Registries, when set, make the policy a mirror of container
	// registries (see the CachePolicy field); DefaultRegistry is the one
	// of requests that name none, nil when there is none.
	Registries      []*Registry
	DefaultRegistry *Registry
	// TagTTL is how long a manifest by tag is served before it is
	// revalidated (default DefaultTagTTL).
	TagTTL time.Duration
	// PullTokenFile, when set, holds the token a client must present to
	// pull through the mirror.
	PullTokenFile string

	hosts  []string // lower-case; "*.x" wildcards; empty: every host
	prefix string
	key    []keyPart
	keyLen int // the literal parts' length, for sizing a key
	// secretKey: the key template holds a credential's value (a
	// $cookie_<name>, or a $http_<name> redact.Secret names), which
	// ShownKey hides.
	secretKey bool
	statusTTL []*pb.StatusTTL
	heuristic []uint32
	excluded  []*pb.StatusRange
	bypass    []*pb.BypassRule
	fields    []string // canonical; see Fields
}

// keyPart is a literal or a variable of a key template.
type keyPart struct {
	literal  string // for $http_<name>, the field's canonical name
	variable string // "" for a literal
}

// MinSliceSize and MaxSliceSize bound the slice a policy may ask for.
const (
	MinSliceSize = 64 << 10
	MaxSliceSize = 1 << 30
)

// Default is the policy of requests no policy matches.
var Default = mustCompile(&pb.CachePolicy{Name: "default"})

func mustCompile(p *pb.CachePolicy) *Policy {
	c, err := Compile(p)
	if err != nil {
		panic(err)
	}
	return c
}

// Compile checks p as a node runs it and returns its compiled form. Its
// errors name the policy and the field's problem.
func Compile(p *pb.CachePolicy) (*Policy, error) {
	if v := Check(p); len(v) > 0 {
		msgs := make([]string, len(v))
		for i, f := range v {
			msgs[i] = f.String()
		}
		return nil, fmt.Errorf("policy %s: %s", p.GetName(), strings.Join(msgs, "; "))
	}
	c := &Policy{
		Name:              p.GetName(),
		Mode:              p.GetMode(),
		DefaultTTL:        p.GetDefaultTtl().AsDuration(),
		MaxObject:         p.GetMaxObjectSize(),
		SliceSize:         p.GetSliceSize(),
		ReplicationFactor: int(p.GetReplicationFactor()),
		HotThreshold:      int(p.GetHotThreshold()),
		Compress:          p.Compress == nil || p.GetCompress(),

		StaleWhileRevalidate: p.GetStaleWhileRevalidate().AsDuration(),
		StaleIfError:         p.GetStaleIfError().AsDuration(),
		CacheAuthorized:      p.CacheAuthorized == nil || p.GetCacheAuthorized(),
		StorePrivate:         p.GetStorePrivate(),
		StoreSetCookie:       p.GetStoreSetCookie(),
		PartialContent:       p.GetPartialContent(),
		RegistryAware:        p.RegistryAware == nil || p.GetRegistryAware(),
		VaryBy:               p.GetVaryBy(),
		ClientHost:           p.GetOriginHost() == "client",
		AuthorizeEach:        p.GetAuthorizeEveryRequest(),
		CacheStatusKey:       p.GetCacheStatusKey(),
		MaxVariants:          int(p.GetMaxVariants()),
		OriginTimeout:        p.GetOriginTimeout().AsDuration(),
		CollapseTimeout:      p.GetCollapseTimeout().AsDuration(),
		RelayTimeout:         p.GetRelayTimeout().AsDuration(),
		prefix:               p.GetPathPrefix(),
		statusTTL:            p.GetStatusTtls(),
		heuristic:            p.GetHeuristicStatuses(),
		excluded:             p.GetExcludedStatuses(),
		bypass:               p.GetBypass(),
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 2
	}
	if f := p.GetTargetedCacheControl(); f != "" {
		c.Targeted = []string{textproto.CanonicalMIMEHeaderKey(f)}
	}
	// Unset means on, but under authorize_every_request, which serves
	// nothing stale (set there, Check refuses it).
	c.StaleIfDisconnected = p.StaleIfDisconnected == nil && !c.AuthorizeEach || p.GetStaleIfDisconnected()
	c.compileRegistries(p)
	if c.Mode == pb.CacheMode_CACHE_MODE_UNSPECIFIED {
		c.Mode = pb.CacheMode_CACHE_MODE_SHARDED
	}
	for _, o := range p.GetOriginUrls() {
		u, _ := url.Parse(o) // Check parsed it
		c.Origins = append(c.Origins, u)
	}
	for _, h := range p.GetHosts() {
		c.hosts = append(c.hosts, strings.ToLower(h))
	}
	tmpl := p.GetKeyTemplate()
	if tmpl == "" {
		tmpl = DefaultKeyTemplate
	}
	key, err := parseTemplate(tmpl)
	if err != nil {
		return nil, fmt.Errorf("policy %s: key template %q: %w", c.Name, tmpl, err)
	}
	c.key = key
	for _, part := range key {
		c.keyLen += len(part.literal)
		switch {
		case strings.HasPrefix(part.variable, "http_"):
			c.fields = appendField(c.fields, part.literal)
			c.secretKey = c.secretKey || redact.Secret(part.literal)
		case strings.HasPrefix(part.variable, "cookie_"):
			c.fields = appendField(c.fields, "Cookie")
			c.secretKey = true
		}
	}
	for _, f := range c.VaryBy {
		c.fields = appendField(c.fields, textproto.CanonicalMIMEHeaderKey(f))
	}
	return c, nil
}

// Fields are the request header fields (canonical) the policy keys or
// varies by, beyond the node's own: its key template's $http_<name> and
// $cookie_<name>, and vary_by.
func (p *Policy) Fields() []string { return p.fields }

func appendField(fs []string, f string) []string {
	if slices.Contains(fs, f) {
		return fs
	}
	return append(fs, f)
}

// TemplateVariables names what a key template may use.
const TemplateVariables = "$scheme $host $request_uri $uri $args $method $http_<name> $cookie_<name>"

// CheckKeyTemplate reports what is wrong with a key template, nil if nothing.
func CheckKeyTemplate(t string) error {
	_, err := parseTemplate(t)
	return err
}

// parseTemplate splits "$scheme$host$request_uri" into parts. A variable
// name runs over lower-case letters, digits and '_'.
func parseTemplate(t string) ([]keyPart, error) {
	if !strings.Contains(t, "$") {
		return nil, errors.New("no variable: every request would share one key")
	}
	at := 0 // the offset of t in the whole template
	var parts []keyPart
	for len(t) > 0 {
		i := strings.IndexByte(t, '$')
		if i < 0 {
			parts = append(parts, keyPart{literal: t})
			break
		}
		if i > 0 {
			parts = append(parts, keyPart{literal: t[:i]})
			t, at = t[i:], at+i
		}
		j := 1
		for j < len(t) && (t[j] == '_' || t[j] >= 'a' && t[j] <= 'z' || t[j] >= '0' && t[j] <= '9') {
			j++
		}
		name := t[1:j]
		switch {
		case name == "scheme", name == "host", name == "request_uri", name == "uri", name == "args", name == "method",
			strings.HasPrefix(name, "http_") && len(name) > 5, strings.HasPrefix(name, "cookie_") && len(name) > 7:
		case name == "":
			return nil, fmt.Errorf("the '$' at byte %d starts no variable (names are lower-case: %s)", at, TemplateVariables)
		case name == "http_" || name == "cookie_":
			return nil, fmt.Errorf("$%s at byte %d names no header or cookie (%s)", name, at, TemplateVariables)
		default:
			return nil, fmt.Errorf("unknown variable $%s at byte %d (known: %s)", name, at, TemplateVariables)
		}
		part := keyPart{variable: name}
		if field, ok := strings.CutPrefix(name, "http_"); ok {
			part.literal = textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(field, "_", "-")) // the field it reads
		}
		parts = append(parts, part)
		t, at = t[j:], at+j
	}
	return parts, nil
}

// Host is the request's host as keys use it: lower-case, without port or
// trailing dot, as nginx's $host.
func Host(r *http.Request) string {
	host := r.Host
	if strings.IndexByte(host, ':') >= 0 { // SplitHostPort's error for a bare host costs an allocation
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	return strings.ToLower(strings.TrimRight(host, ".")) // "example.com." is example.com
}

// URLKeys are the keys r's URL is stored under, one for each scheme a
// client may have used: what a purge or an invalidation of the URL drops.
func (p *Policy) URLKeys(r *http.Request) [2]string {
	return [2]string{p.Key("http", r), p.Key("https", r)}
}

// Key builds r's cache key from the policy's template.
func (p *Policy) Key(scheme string, r *http.Request) string { return p.buildKey(scheme, r, false) }

// ShownKey is key, r's cache key, as logs and operators' views show it:
// the values of the template's cookies and of its credential fields
// (redact.Secret: X-Api-Key, Authorization) REDACTED. A policy that keys
// a cache per session or per API key must not hand the key's credentials
// to whoever reads the logs. key itself when the template holds none (or
// p is nil: the request matched no policy yet).
func (p *Policy) ShownKey(scheme string, r *http.Request, key string) string {
	if p == nil || !p.secretKey {
		return key
	}
	return p.buildKey(scheme, r, true)
}

func (p *Policy) buildKey(scheme string, r *http.Request, shown bool) string {
	var b strings.Builder
	b.Grow(p.keyLen + len(r.Host) + len(r.URL.Path) + len(r.URL.RawQuery) + 8)
	for _, part := range p.key {
		switch v := part.variable; {
		case v == "":
			b.WriteString(part.literal)
		case v == "scheme":
			b.WriteString(scheme)
		case v == "host":
			b.WriteString(Host(r))
		case v == "request_uri":
			writeRequestURI(&b, r.URL)
		case v == "uri":
			b.WriteString(r.URL.EscapedPath())
		case v == "args":
			b.WriteString(r.URL.RawQuery)
		case v == "method":
			b.WriteString(r.Method)
		case strings.HasPrefix(v, "http_"):
			if shown && redact.Secret(part.literal) {
				if len(r.Header[part.literal]) > 0 {
					b.WriteString("REDACTED")
				}
				continue
			}
			// Every line of the field, joined as one (RFC 9110 5.3): a
			// client that splits Accept over lines asks what one that
			// sends it on one line does. Cookie lines join with "; ", as
			// HTTP/2 joins them (RFC 9113 8.2.3) on the peer hop.
			sep := ", "
			if part.literal == "Cookie" {
				sep = "; "
			}
			for i, line := range r.Header[part.literal] {
				if i > 0 {
					b.WriteString(sep)
				}
				b.WriteString(line)
			}
		case strings.HasPrefix(v, "cookie_"):
			if c, err := r.Cookie(v[7:]); err == nil && shown {
				b.WriteString("REDACTED")
			} else if err == nil {
				b.WriteString(c.Value)
			}
		}
	}
	return b.String()
}

// writeRequestURI writes u.RequestURI() without building it first.
func writeRequestURI(b *strings.Builder, u *url.URL) {
	if u.Opaque != "" {
		b.WriteString(u.RequestURI())
		return
	}
	if p := u.EscapedPath(); p != "" {
		b.WriteString(p)
	} else {
		b.WriteByte('/')
	}
	if u.ForceQuery || u.RawQuery != "" {
		b.WriteByte('?')
		b.WriteString(u.RawQuery)
	}
}

// Bypass reports whether a bypass rule matches r.
func (p *Policy) Bypass(r *http.Request) bool {
	for _, rule := range p.bypass {
		if ruleMatches(rule, r) {
			return true
		}
	}
	return false
}

func ruleMatches(rule *pb.BypassRule, r *http.Request) bool {
	if m := rule.GetMethods(); len(m) > 0 && !slices.Contains(m, r.Method) {
		return false
	}
	if hs := rule.GetHeaders(); len(hs) > 0 && !slices.ContainsFunc(hs, func(h string) bool { return r.Header.Get(h) != "" }) {
		return false
	}
	if cs := rule.GetCookies(); len(cs) > 0 && !slices.ContainsFunc(cs, func(c string) bool { _, err := r.Cookie(c); return err == nil }) {
		return false
	}
	if ps := rule.GetPathPatterns(); len(ps) > 0 && !slices.ContainsFunc(ps, func(pat string) bool { ok, _ := path.Match(pat, r.URL.Path); return ok }) {
		return false
	}
	return true
}

// Excluded reports whether responses with status must not be stored.
func (p *Policy) Excluded(status int) bool {
	for _, r := range p.excluded {
		if uint32(status) >= r.GetFrom() && uint32(status) <= r.GetTo() {
			return true
		}
	}
	return false
}

// Heuristic reports whether the policy gives status heuristic freshness
// beyond the statuses cacheable by default.
func (p *Policy) Heuristic(status int) bool {
	return slices.Contains(p.heuristic, uint32(status))
}

// StatusTTL returns the lifetime the policy sets for status, like
// proxy_cache_valid; ok is false when it sets none.
func (p *Policy) StatusTTL(status int) (time.Duration, bool) {
	for _, st := range p.statusTTL {
		if uint32(status) >= st.GetStatusFrom() && uint32(status) <= st.GetStatusTo() {
			return st.GetTtl().AsDuration(), true
		}
	}
	return 0, false
}

// matches reports whether the policy covers host and path, and how
// specifically: longer path prefixes first, then exact hosts before
// wildcards before any host.
func (p *Policy) matches(host, urlPath string) (bool, int) {
	if !strings.HasPrefix(urlPath, p.prefix) {
		return false, 0
	}
	score := len(p.prefix) * 4
	if len(p.hosts) == 0 {
		return true, score
	}
	for _, h := range p.hosts {
		switch {
		case h == host:
			return true, score + 2
		case strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]):
			return true, score + 1
		}
	}
	return false, 0
}

// Set is an immutable, compiled policy set at one revision.
type Set struct {
	revision int64
	source   map[string]*pb.CachePolicy
	compiled []*Policy
}

// Empty is the set before the control plane sent any.
var Empty = &Set{source: map[string]*pb.CachePolicy{}}

// Revision is the revision of the set.
func (s *Set) Revision() int64 { return s.revision }

// Len is the number of policies.
func (s *Set) Len() int { return len(s.compiled) }

// Match returns the policy for a request to host and path; Default when
// none matches.
func (s *Set) Match(host, urlPath string) *Policy {
	var best *Policy
	bestScore := -1
	for _, p := range s.compiled {
		if ok, score := p.matches(host, urlPath); ok && score > bestScore {
			best, bestScore = p, score
		}
	}
	if best == nil {
		return Default
	}
	return best
}

// ErrGap is returned for an incremental push that does not start at the
// set's revision.
var ErrGap = errors.New("policy: incremental push does not follow the applied revision")

// Apply returns the set after a push: a whole set replaces this one, changes
// are applied on top. An error leaves this set in force.
func (s *Set) Apply(ps *pb.PolicySet) (*Set, error) {
	source := make(map[string]*pb.CachePolicy)
	if ps.GetIncremental() {
		if ps.GetSinceRevision() != s.revision {
			return nil, fmt.Errorf("%w: push is since %d, node runs %d", ErrGap, ps.GetSinceRevision(), s.revision)
		}
		for name, p := range s.source {
			source[name] = p
		}
		for _, name := range ps.GetDeleted() {
			delete(source, name)
		}
	}
	for _, p := range ps.GetPolicies() {
		source[p.GetName()] = p
	}
	next := &Set{revision: ps.GetRevision(), source: source}
	names := make([]string, 0, len(source))
	for name := range source {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		c, err := Compile(source[name])
		if err != nil {
			return nil, err
		}
		next.compiled = append(next.compiled, c)
	}
	return next, nil
}

// validFieldName reports whether f is an HTTP field name (a token).
func validFieldName(f string) bool {
	if f == "" {
		return false
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
