// Package origin is a node's client of the origin: it rewrites a client's
// request for an origin, tries a policy's origins in order, and passes 1xx
// interim responses on. It knows nothing of the cache: what to ask for and
// what to do with the answer are its caller's.
package origin

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/rawio"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Config configures a Client.
type Config struct {
	// Default is the origin of requests whose policy names none. Required.
	Default *url.URL
	// Via names this node in the Via field it adds ("1.1 <Via>").
	Via string
	// HeaderTimeout bounds the wait for a response's header; zero: none.
	HeaderTimeout time.Duration
	// Wrap, when set, wraps the transport (tracing).
	Wrap func(http.RoundTripper) http.RoundTripper
	// Observe, when set, gets each request's time to its response header.
	Observe func(time.Duration)
	// Logger receives failovers. Default slog.Default().
	Logger *slog.Logger
}

// Client fetches from origins.
type Client struct {
	cfg  Config
	http *http.Client
}

// New returns a client with pooled connections: 256 idle per origin, a
// 5 s dial timeout, and redirects passed back rather than followed. Fills
// from plaintext origins take keep-alive connections of its own (h1.go).
func New(cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var rt http.RoundTripper = newH1Transport(Transport(cfg.HeaderTimeout, 256))
	if cfg.Wrap != nil {
		rt = cfg.Wrap(rt)
	}
	return &Client{cfg: cfg, http: &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Transport is the transport of a node's requests to servers outside
// the cluster (origins, registries): a 5 s dial timeout, idlePerHost idle
// connections to each, bodies passed on as they are coded. A slow or huge
// response header is the server's fault: headerTimeout (0: none) and
// 64 KiB bound it, like the client's.
func Transport(headerTimeout time.Duration, idlePerHost int) *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            rawio.Dial(&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}),
		MaxIdleConnsPerHost:    idlePerHost,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  headerTimeout,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
		ForceAttemptHTTP2:      true,
	}
}

// CloseIdle closes the idle connections to every origin.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

// Fetch sends r to origins in order (the default origin when there are
// none) until one answers. A fill is a whole-object GET with no body; a
// bypass forwards the client's method and body, and is not retried on
// another origin once the body may have been read.
//
// extra fields are set on the origin request (a revalidation's validators).
func (c *Client) Fetch(ctx context.Context, r *http.Request, p *policy.Policy, fill bool, extra http.Header) (*http.Response, error) {
	origins := p.Origins
	if len(origins) == 0 {
		origins = []*url.URL{c.cfg.Default}
	}
	var err error
	for i, o := range origins {
		var req *http.Request
		if req, err = c.Request(ctx, r, o, fill); err != nil {
			return nil, err
		}
		if p.ClientHost {
			req.Host = r.Host
		}
		for k, v := range extra {
			req.Header[k] = v
		}
		if !fill {
			req.Body, req.ContentLength = r.Body, r.ContentLength
		}
		var resp *http.Response
		sent := time.Now()
		resp, err = c.http.Do(req)
		if unsupportedTE(err) {
			if req.Body == nil || req.Body == http.NoBody {
				// A valid Transfer-Encoding net/http does not take (coded.go).
				resp, err = c.fetchCoded(req)
			} else {
				err = codingError{err} // the request's body cannot be sent again
			}
		}
		if c.cfg.Observe != nil {
			c.cfg.Observe(time.Since(sent))
		}
		if err == nil {
			relativeLocations(resp.Header, o, req.Host)
			return resp, nil
		}
		if !fill && r.ContentLength != 0 || i == len(origins)-1 {
			break
		}
		c.cfg.Logger.Warn("origin failed; trying the next", "origin", o.Host, "err", err)
	}
	return nil, err
}

// Request builds the request to origin for r: the origin's base URL with
// r's path and query, and r's end-to-end headers (the forwarded chain among
// them, extended where the request arrived) without the nodes' internal
// ones. A fill is always a whole-object GET and carries none of the
// client's conditionals.
func (c *Client) Request(ctx context.Context, r *http.Request, origin *url.URL, fill bool) (*http.Request, error) {
	method := r.Method
	if fill {
		method = http.MethodGet // a HEAD miss fills with a GET, so the body is stored
	}
	u := *origin
	u.Path = strings.TrimSuffix(u.Path, "/") + r.URL.Path
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = strings.TrimSuffix(origin.EscapedPath(), "/") + r.URL.RawPath
	}
	u.RawQuery = r.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("shardcache: building origin request: %w", err)
	}
	req.Header = r.Header.Clone()
	httpcache.RemoveHopByHop(req.Header)
	hop.Strip(req.Header, nil)
	if fill {
		// A fill brings the whole object for every later client, not a 304
		// or a range for this one.
		for _, h := range httpcache.ConditionalFields {
			req.Header.Del(h)
		}
	}
	via := "1.1 " + c.cfg.Via
	if prior := r.Header.Get("Via"); prior != "" {
		via = prior + ", " + via
	}
	req.Header.Set("Via", via)
	return req, nil
}

// relativeLocations rewrites Location and Content-Location fields that
// point at the origin (its base URL, or the Host it was sent) into
// path-absolute references (RFC 9110 10.2.2, 8.7): a client resolves them
// against the URL it asked, the node that received its request, so it
// comes back through the cluster and never learns the origin's address,
// as nginx's proxy_redirect default does. The origin's base path is taken
// off, as the node added it.
func relativeLocations(h http.Header, origin *url.URL, host string) {
	for _, f := range [...]string{"Location", "Content-Location"} {
		v := h[f]
		if len(v) != 1 {
			continue
		}
		u, err := url.Parse(v[0])
		if err != nil || !u.IsAbs() || !strings.EqualFold(u.Scheme, origin.Scheme) ||
			!strings.EqualFold(u.Host, origin.Host) && !strings.EqualFold(u.Host, host) {
			continue
		}
		path := u.EscapedPath()
		if base := strings.TrimSuffix(origin.EscapedPath(), "/"); base != "" {
			rest, ok := strings.CutPrefix(path, base)
			if !ok || rest != "" && rest[0] != '/' {
				continue // outside the part of the origin the cluster fronts
			}
			path = rest
		}
		if path == "" {
			path = "/"
		}
		ref := path
		if u.RawQuery != "" || u.ForceQuery {
			ref += "?" + u.RawQuery
		}
		if u.Fragment != "" {
			ref += "#" + u.EscapedFragment()
		}
		h[f] = []string{ref}
	}
}
