package policy

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Registry is one upstream container registry of a mirror policy.
type Registry struct {
	// Host is the registry's name as clients give it (ns=, or the first
	// path segment): lower case, e.g. "docker.io".
	Host string
	// URL is its API base URL.
	URL *url.URL
	// CredentialsFile holds the credentials the node asks the registry's
	// token realm with; "" asks anonymously.
	CredentialsFile string
	// MaxConnections bounds the requests a node sends it at once, and
	// Bandwidth the bytes a second a node reads from it; 0: no bound.
	MaxConnections int
	Bandwidth      int64
}

// DefaultTagTTL is how long a manifest by tag is served before it is
// revalidated, where the policy does not say.
const DefaultTagTTL = time.Minute

// MaxRegistries bounds the registries one policy mirrors.
const MaxRegistries = 64

// Registry returns the policy's registry named host (case-insensitive),
// nil when it mirrors none of that name.
func (p *Policy) Registry(host string) *Registry {
	for _, r := range p.Registries {
		if strings.EqualFold(r.Host, host) {
			return r
		}
	}
	return nil
}

// checkRegistries: a mirror policy's registries, and the fields that only
// a mirror has or that a mirror excludes.
func checkRegistries(p *pb.CachePolicy, v *violations) {
	regs := p.GetRegistries()
	if len(regs) == 0 {
		if d := p.GetDefaultRegistry(); d != "" {
			v.bad("default_registry", "%q names no registry: the policy lists none under registries", d)
		}
		if p.TagTtl != nil || p.GetPullTokenFile() != "" {
			v.bad("registries", "tag_ttl and pull_token_file apply to a mirror: list its registries")
		}
		return
	}
	if len(regs) > MaxRegistries {
		v.bad("registries", "%d registries: at most %d", len(regs), MaxRegistries)
		return
	}
	if len(p.GetOriginUrls()) > 0 {
		v.bad("origin_urls", "not with registries: a mirror's origins are its registries' URLs")
	}
	if p.GetSliceSize() > 0 {
		v.bad("slice_size", "not with registries: a mirror keeps blobs whole, keyed by digest")
	}
	if p.GetMode() == pb.CacheMode_CACHE_MODE_BYPASS {
		v.bad("mode", "bypass, with registries: a mirror serves through its cache")
	}
	if p.GetAuthorizeEveryRequest() {
		v.bad("authorize_every_request", "not with registries: a mirror answers the registries' challenges itself")
	}
	if p.GetPartialContent() {
		v.bad("partial_content", "not with registries: a mirror stores blobs whole, their digests checked; ranges are served from them")
	}
	if p.RegistryAware != nil && !p.GetRegistryAware() {
		v.bad("registry_aware", "false, with registries: a mirror's manifests vary on Accept, or one client's media type is served to another")
	}
	if pp := p.GetPathPrefix(); !strings.HasPrefix("/v2/", pp) {
		v.bad("path_prefix", "%q: a mirror serves the registry API, /v2/ (want /v2/ or a prefix of it)", pp)
	}
	if negative(p.GetTagTtl()) {
		v.bad("tag_ttl", "%s: want zero (revalidate on every use) or more", p.GetTagTtl().AsDuration())
	}
	if f := p.GetPullTokenFile(); f != "" && !filepath.IsAbs(f) {
		v.bad("pull_token_file", "%q: want an absolute path (a file mounted on the nodes)", f)
	}
	hosts := map[string]bool{}
	for i, r := range regs {
		checkRegistry(fmt.Sprintf("registries[%d]", i), r, v)
		if h := strings.ToLower(r.GetHost()); hosts[h] {
			v.bad(fmt.Sprintf("registries[%d].host", i), "%q is listed twice", r.GetHost())
		} else {
			hosts[h] = true
		}
	}
	if d := p.GetDefaultRegistry(); d != "" && !hosts[strings.ToLower(d)] {
		v.bad("default_registry", "%q is not one of the registries' hosts", d)
	}
}

func checkRegistry(field string, r *pb.Registry, v *violations) {
	if !validRegistryHost(r.GetHost()) {
		v.bad(field+".host", "%q: want a lower-case host name, with a port if it has one (docker.io, registry.local:5000)", r.GetHost())
	}
	u, err := url.Parse(r.GetUrl())
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		v.bad(field+".url", "%q: want the registry's http(s) base URL, e.g. https://registry-1.docker.io", r.GetUrl())
	}
	if f := r.GetCredentialsFile(); f != "" && !filepath.IsAbs(f) {
		v.bad(field+".credentials_file", "%q: want an absolute path (a file mounted on the nodes)", f)
	}
	if r.GetBandwidth() < 0 {
		v.bad(field+".bandwidth", "%d: want bytes a second, or 0 for no bound", r.GetBandwidth())
	}
}

// compileRegistries compiles a mirror policy's registries, which Check
// has checked.
func (c *Policy) compileRegistries(p *pb.CachePolicy) {
	c.TagTTL = p.GetTagTtl().AsDuration()
	if p.TagTtl == nil {
		c.TagTTL = DefaultTagTTL
	}
	c.PullTokenFile = p.GetPullTokenFile()
	for _, r := range p.GetRegistries() {
		u, _ := url.Parse(r.GetUrl()) // Check parsed it
		u.Path = strings.TrimSuffix(u.Path, "/")
		c.Registries = append(c.Registries, &Registry{Host: r.GetHost(), URL: u, CredentialsFile: r.GetCredentialsFile(),
			MaxConnections: int(r.GetMaxConnections()), Bandwidth: r.GetBandwidth()})
	}
	if d := p.GetDefaultRegistry(); d != "" {
		c.DefaultRegistry = c.Registry(d)
	}
}

// validRegistryHost reports whether h is a registry's name: lower-case
// DNS labels, an optional numeric port.
func validRegistryHost(h string) bool {
	name, port, hasPort := strings.Cut(h, ":")
	if name == "" || len(h) > 255 || hasPort && (port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "") {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		if strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}
