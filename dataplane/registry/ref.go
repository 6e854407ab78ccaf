// Package registry is what a node does differently for a policy that
// mirrors container registries (policy.Registry): which upstream a request
// is for and what it is keyed by (Parse), the upstream's token challenges
// answered with the node's own credentials and the tokens kept per scope
// (Client), the digest a body must have (Verify), and the OCI error bodies
// a refusal is written with (WriteError). The owner's stages and the front
// call it; it knows nothing of the store.
//
// The content rules it encodes: a blob, and a manifest asked for by
// digest, is keyed by that digest alone (every upstream, name and query
// shares one verified copy), stored without expiry and never revalidated;
// a manifest asked for by tag is keyed by its upstream, name and tag, and
// revalidated by a HEAD after the policy's tag_ttl.
package registry

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/shardcache/shardcache/sdk/policy"
)

// Kind is what a request asks a registry for.
type Kind int

// The kinds of request a mirror serves.
const (
	// KindBase is GET /v2/, answered by the node itself.
	KindBase Kind = iota
	KindBlob
	KindManifest
	KindReferrers
	KindTags
)

// Ref is a request to a mirror policy, parsed: its upstream, repository
// name and reference.
type Ref struct {
	// Registry is the upstream the request goes to (nil for KindBase).
	Registry *policy.Registry
	Kind     Kind
	// Name is the repository's name at the upstream ("library/alpine").
	Name string
	// Reference is a manifest's tag or digest, a blob's or a referrers
	// subject's digest; "" for tags and the base.
	Reference string
	// Query is what the upstream is sent of the client's query: the
	// referrers filter (artifactType), the tags list's n and last; never
	// ns.
	Query string
	// Policy names the mirror policy the request came under: every key
	// is the policy's own (Key).
	Policy string
}

// Forever is the lifetime of content addressed by digest: it never
// changes, so it is never revalidated.
const Forever = 100 * 365 * 24 * time.Hour

// MaxManifestBytes bounds a manifest (and a referrers or tags listing) a
// node accepts from a registry: 4 MiB, as distribution's own limit.
const MaxManifestBytes = 4 << 20

var (
	// nameComponent and the separators are the OCI distribution spec's
	// repository name grammar.
	validName   = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	validTag    = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	validDigest = regexp.MustCompile(`^[a-z0-9]+([+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
)

// maxNameBytes bounds a repository name, as distribution does.
const maxNameBytes = 255

// Parse reads r as a request to mirror policy p. It refuses a name or
// reference the spec does not allow, an encoded slash, an ns (or a first
// path segment that is a host name) naming a registry p does not list, and
// a request that names none when p has no default.
func Parse(r *http.Request, p *policy.Policy) (*Ref, error) {
	if raw := r.URL.RawPath; raw != "" && strings.Contains(strings.ToLower(raw), "%2f") {
		return nil, errf(http.StatusBadRequest, CodeNameInvalid, "the path has an encoded slash (%%2F): a repository name's slashes are plain")
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/")
	if r.URL.Path == "/v2" || ok && rest == "" {
		return &Ref{Kind: KindBase}, nil
	}
	if !ok {
		return nil, errf(http.StatusNotFound, CodeNameUnknown, "a mirror serves the registry API under /v2/")
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errf(http.StatusBadRequest, CodeUnsupported, "the query is malformed: %v", err)
	}
	ref := &Ref{Policy: p.Name}
	name, kind, reference, err := split(rest)
	if err != nil {
		return nil, err
	}
	ref.Kind, ref.Reference = kind, reference
	ref.Registry, name, err = pick(p, q, name)
	if err != nil {
		return nil, err
	}
	if len(name) > maxNameBytes || !validName.MatchString(name) {
		return nil, errf(http.StatusBadRequest, CodeNameInvalid, "repository name %s is not a valid name (lower-case components separated by /, no .. or empty parts)", quote(name))
	}
	ref.Name = name
	switch kind {
	case KindBlob, KindReferrers:
		if !validDigest.MatchString(reference) {
			return nil, errf(http.StatusBadRequest, CodeDigestInvalid, "%s is not a digest (algorithm:hex)", quote(reference))
		}
		if kind == KindBlob && !CheckDigest(reference) {
			return nil, errf(http.StatusBadRequest, CodeDigestInvalid, "digest %s: the mirror verifies sha256 and sha512 digests only", quote(reference))
		}
	case KindManifest:
		if !validTag.MatchString(reference) && !validDigest.MatchString(reference) {
			return nil, errf(http.StatusBadRequest, CodeManifestInvalid, "%s is neither a tag nor a digest", quote(reference))
		}
		if validDigest.MatchString(reference) && !CheckDigest(reference) {
			return nil, errf(http.StatusBadRequest, CodeDigestInvalid, "digest %s: the mirror verifies sha256 and sha512 digests only", quote(reference))
		}
	}
	// The upstream is sent what the spec gives the request kind, and
	// nothing else: the key holds no more (a blob's or a manifest's holds
	// no query), so nothing else may change what it is answered.
	sent := url.Values{}
	for _, k := range queryOf[kind] {
		if v, ok := q[k]; ok {
			sent[k] = v
		}
	}
	ref.Query = sent.Encode()
	return ref, nil
}

// queryOf is the query each kind of request takes (OCI distribution
// spec): the referrers' filter, the tags list's page.
var queryOf = map[Kind][]string{KindReferrers: {"artifactType"}, KindTags: {"n", "last"}}

// split cuts "<name>/<kind>/<reference>" at its last kind segment.
func split(rest string) (name string, kind Kind, reference string, err error) {
	if n, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		return n, KindTags, "", nil
	}
	for _, k := range []struct {
		seg  string
		kind Kind
	}{{"/blobs/", KindBlob}, {"/manifests/", KindManifest}, {"/referrers/", KindReferrers}} {
		if i := strings.LastIndex(rest, k.seg); i > 0 {
			return rest[:i], k.kind, rest[i+len(k.seg):], nil
		}
	}
	return "", 0, "", errf(http.StatusNotFound, CodeUnsupported, "%s is not a path the registry API pulls by (blobs, manifests, referrers, tags/list)", quote("/v2/"+rest))
}

// pick picks the request's registry: ns, else a first path segment
// that is a host name, else the default.
func pick(p *policy.Policy, q url.Values, name string) (*policy.Registry, string, error) {
	if ns := q["ns"]; len(ns) > 0 {
		if len(ns) > 1 {
			return nil, "", errf(http.StatusBadRequest, CodeUnsupported, "ns is given %d times: name one registry", len(ns))
		}
		reg := p.Registry(ns[0])
		if reg == nil {
			return nil, "", errf(http.StatusNotFound, CodeNameUnknown, "registry %s is not one this mirror serves (the policy's registries)", quote(ns[0]))
		}
		return reg, name, nil
	}
	if first, after, ok := strings.Cut(name, "/"); ok && hostLike(first) {
		reg := p.Registry(first)
		if reg == nil {
			return nil, "", errf(http.StatusNotFound, CodeNameUnknown, "registry %s is not one this mirror serves (the policy's registries)", quote(first))
		}
		return reg, after, nil
	}
	if p.DefaultRegistry == nil {
		return nil, "", errf(http.StatusNotFound, CodeNameUnknown, "the request names no registry (ns= or /v2/<host>/<name>/...) and the mirror has no default_registry")
	}
	return p.DefaultRegistry, name, nil
}

// hostLike reports whether a first path segment is a registry host, as
// container tools read an image reference: it has a dot or a port, or is
// localhost.
func hostLike(s string) bool {
	return strings.ContainsAny(s, ".:") || s == "localhost"
}

// ByDigest reports whether the request names its content by digest: a
// blob, or a manifest asked for by digest.
func (r *Ref) ByDigest() bool {
	return r.Kind == KindBlob || r.Kind == KindManifest && validDigest.MatchString(r.Reference)
}

// Key is the request's cache key, within its mirror policy's own (a
// policy's name holds no "/"): the digest alone for content by digest, one
// copy for every upstream the policy lists; the upstream, name and
// reference for what a registry may change. Two mirror policies share
// nothing: a private mirror's content (its pull token, its credentials) is
// never served through a public one, whatever a client knows of it.
func (r *Ref) Key() string {
	p := r.Policy + "/"
	switch {
	case r.Kind == KindBlob:
		return "oci-blob:" + p + r.Reference
	case r.ByDigest():
		return "oci-manifest:" + p + r.Reference
	case r.Kind == KindManifest:
		return "oci-tag:" + p + r.Registry.Host + "/" + r.Name + ":" + r.Reference
	case r.Kind == KindReferrers:
		return "oci-referrers:" + p + r.Registry.Host + "/" + r.Name + "@" + r.Reference + "?" + r.Query
	}
	return "oci-tags:" + p + r.Registry.Host + "/" + r.Name + "?" + r.Query
}

// Path is the request's path at the upstream, its base path left out.
func (r *Ref) Path() string {
	switch r.Kind {
	case KindBlob:
		return "/v2/" + r.Name + "/blobs/" + r.Reference
	case KindManifest:
		return "/v2/" + r.Name + "/manifests/" + r.Reference
	case KindReferrers:
		return "/v2/" + r.Name + "/referrers/" + r.Reference
	case KindTags:
		return "/v2/" + r.Name + "/tags/list"
	}
	return "/v2/"
}

// Scope is the token scope a pull of the request needs (the distribution
// token spec's resource scope).
func (r *Ref) Scope() string { return "repository:" + r.Name + ":pull" }

// Lifetime is how long an answer to the request is served before it is
// revalidated: Forever for content by digest, the policy's tag TTL for
// the rest.
func (r *Ref) Lifetime(p *policy.Policy) time.Duration {
	if r.ByDigest() {
		return Forever
	}
	return p.TagTTL
}

// Bounded reports whether the answer is small and read whole before it is
// served (a manifest or a listing, at most MaxManifestBytes): a blob
// streams.
func (r *Ref) Bounded() bool { return r.Kind != KindBlob }

func quote(s string) string {
	if len(s) > 128 {
		s = s[:128] + "..."
	}
	return `"` + s + `"`
}
