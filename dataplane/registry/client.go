package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/origin"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Config configures a Client.
type Config struct {
	// Via names this node in the Via field it sends ("1.1 <Via>").
	Via string
	// HeaderTimeout bounds the wait for an upstream's response header;
	// zero: none (the caller's context bounds it).
	HeaderTimeout time.Duration
	// Wrap, when set, wraps the transport (tracing).
	Wrap func(http.RoundTripper) http.RoundTripper
	// Logger receives token fetches that failed. Default slog.Default().
	Logger *slog.Logger
}

// Client fetches from upstream registries as a mirror: it sends none of
// the client's credentials, answers an upstream's 401 challenge with a
// token it fetches with that upstream's credentials (or anonymously) and
// keeps per scope, follows a blob's redirect (to a signed URL) itself, and
// keeps each upstream's connection and bandwidth caps.
type Client struct {
	cfg Config
	// http follows up to maxRedirects redirects, without the upstream's
	// token; realm asks token realms.
	http, realm *http.Client
	mu          sync.Mutex
	upstreams   map[string]*upstream
}

// upstream is what a node keeps of one registry across policy pushes.
type upstream struct {
	tokens *tokens
	slots  chan struct{} // nil: no connection cap
	rate   *rateLimit    // nil: no bandwidth cap
}

// maxUpstreams bounds the registries whose state a node keeps; at the
// bound it is dropped whole (tokens are fetched again).
const maxUpstreams = 1024

// maxRedirects bounds the redirects followed for one request.
const maxRedirects = 5

// NewClient returns a client with pooled connections.
func NewClient(cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var rt http.RoundTripper = origin.Transport(cfg.HeaderTimeout, 64)
	if cfg.Wrap != nil {
		rt = cfg.Wrap(rt)
	}
	follow := func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("%w: more than %d, the last to %s", ErrRedirects, maxRedirects, req.URL.Host)
		}
		// A redirect off the upstream (to a signed URL of its object
		// storage) carries its own authority, and never the upstream's
		// token, whatever the port.
		if !strings.EqualFold(req.URL.Host, via[0].URL.Host) {
			req.Header.Del("Authorization")
		}
		return nil
	}
	return &Client{cfg: cfg, upstreams: map[string]*upstream{},
		http:  &http.Client{Transport: rt, CheckRedirect: follow},
		realm: &http.Client{Transport: rt, CheckRedirect: follow, Timeout: tokenWait}}
}

// CloseIdle closes idle connections to every upstream.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

func (c *Client) upstream(reg *policy.Registry) *upstream {
	id := fmt.Sprintf("%s|%s|%s|%d|%d", reg.Host, reg.URL, reg.CredentialsFile, reg.MaxConnections, reg.Bandwidth)
	c.mu.Lock()
	defer c.mu.Unlock()
	if u, ok := c.upstreams[id]; ok {
		return u
	}
	if len(c.upstreams) >= maxUpstreams {
		clear(c.upstreams)
	}
	u := &upstream{tokens: newTokens()}
	if reg.MaxConnections > 0 {
		u.slots = make(chan struct{}, reg.MaxConnections)
	}
	if reg.Bandwidth > 0 {
		u.rate = newRateLimit(reg.Bandwidth)
	}
	c.upstreams[id] = u
	return u
}

// Fetch asks ref's upstream for it, for the client request r (whose
// Accept it passes on, and nothing else of its header). extra fields are
// set on the request; an If-None-Match among them makes it a
// revalidation: a HEAD first, answered as a 304 when the upstream still
// names a digest the stored answer has, so an unchanged tag costs no GET.
// The response's body holds the upstream's connection slot until closed.
func (c *Client) Fetch(ctx context.Context, ref *Ref, r *http.Request, extra http.Header) (*http.Response, error) {
	u := c.upstream(ref.Registry)
	release, err := u.acquire(ctx)
	if err != nil {
		return nil, err
	}
	if inm := extra.Values("If-None-Match"); len(inm) > 0 && !ref.ByDigest() {
		resp, err := c.send(ctx, u, ref, http.MethodHead, r, extra)
		if err != nil {
			release()
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotModified || resp.StatusCode == http.StatusOK && sameDigest(resp.Header, inm) {
			release()
			resp.StatusCode, resp.Status, resp.Body, resp.ContentLength = http.StatusNotModified, "304 Not Modified", http.NoBody, 0
			resp.Header.Del("Content-Length")
			return resp, nil
		}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			release()
			resp.Body = http.NoBody
			return resp, nil // the stored tag may be served stale
		}
	}
	resp, err := c.send(ctx, u, ref, http.MethodGet, r, extra)
	if err != nil {
		release()
		return nil, err
	}
	var body io.Reader = resp.Body
	if u.rate != nil {
		body = &limitedReader{r: body, rate: u.rate, ctx: ctx}
	}
	resp.Body = &slotBody{Reader: body, closer: resp.Body, release: release}
	return resp, nil
}

// sameDigest reports whether h's Docker-Content-Digest is one of the
// If-None-Match values (entity tags, as a registry's ETag is the digest).
func sameDigest(h http.Header, inm []string) bool {
	d := h.Get("Docker-Content-Digest")
	if d == "" {
		return false
	}
	for _, v := range inm {
		for tag := range strings.SplitSeq(v, ",") {
			tag = strings.Trim(strings.TrimPrefix(strings.TrimSpace(tag), "W/"), `"`)
			if tag == d {
				return true
			}
		}
	}
	return false
}

// send makes one request to the upstream, answering a 401 challenge once.
func (c *Client) send(ctx context.Context, u *upstream, ref *Ref, method string, r *http.Request, extra http.Header) (*http.Response, error) {
	target := *ref.Registry.URL
	target.Path += ref.Path()
	target.RawPath, target.RawQuery = "", ref.Query
	req, err := http.NewRequestWithContext(ctx, method, target.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("registry: building the upstream request: %w", err)
	}
	if r != nil && ref.Kind != KindBlob {
		if a := r.Header.Values("Accept"); len(a) > 0 {
			req.Header["Accept"] = a
		}
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "shardcache")
	via := "1.1 " + c.cfg.Via
	if r != nil {
		if prior := r.Header.Get("Via"); prior != "" {
			via = prior + ", " + via
		}
	}
	req.Header.Set("Via", via)
	if tok := u.tokens.cached(ref.Scope()); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.do(req)
	// Only the registry's own challenge is answered: a 401 from where it
	// redirected (blob storage) would have its realm sent the registry's
	// credentials, and its token kept for the repository's scope.
	if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Request.URL.Host != target.Host {
		return resp, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	auth, err := c.authorize(ctx, u, ref, resp.Header.Values("Www-Authenticate"))
	if err != nil {
		return nil, err
	}
	retry := req.Clone(ctx)
	retry.Header.Set("Authorization", auth)
	if resp, err = c.do(retry); err == nil {
		resp.Header.Del("Www-Authenticate") // the client is never sent to the upstream's realm
	}
	return resp, err
}

// do sends req, naming a redirect loop and an unreachable upstream.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	switch {
	case errors.Is(err, ErrRedirects):
		return nil, &Error{Status: http.StatusBadGateway, Code: CodeUpstream, Message: "the upstream's redirects loop or go on too long: " + err.Error(), Err: ErrRedirects}
	case err != nil:
		return nil, err
	}
	return resp, nil
}

// authorize answers a challenge: a Bearer token for the request's scope
// (kept, shared), or Basic credentials.
func (c *Client) authorize(ctx context.Context, u *upstream, ref *Ref, vs []string) (string, error) {
	ch, err := parseChallenge(vs)
	if err != nil {
		return "", upstreamError(err, "the upstream's 401 cannot be answered")
	}
	creds, err := readCredentials(ref.Registry.CredentialsFile)
	if err != nil {
		return "", upstreamError(err, "registry %s", ref.Registry.Host)
	}
	if ch.scheme == "basic" {
		if creds == nil {
			return "", &Error{Status: http.StatusBadGateway, Code: CodeUpstream, Err: ErrChallenge,
				Message: "registry " + ref.Registry.Host + " asks for Basic credentials and the mirror has no credentials_file for it"}
		}
		req := http.Request{Header: http.Header{}}
		req.SetBasicAuth(creds.Username, creds.Password)
		return req.Header.Get("Authorization"), nil
	}
	scope := ch.params["scope"]
	if scope == "" {
		scope = ref.Scope()
	}
	tok, err := u.tokens.get(ctx, scope, func(fctx context.Context) (token, error) {
		return fetchToken(fctx, c.realm, ch, scope, creds, time.Now())
	})
	if err != nil {
		c.cfg.Logger.Warn("registry token fetch failed", "registry", ref.Registry.Host, "scope", scope, "err", err)
		return "", upstreamError(err, "registry %s", ref.Registry.Host)
	}
	if scope != ref.Scope() {
		u.tokens.mu.Lock()
		u.tokens.keepLocked(ref.Scope(), u.tokens.kept[scope])
		u.tokens.mu.Unlock()
	}
	return "Bearer " + tok, nil
}

// acquire takes one of the upstream's connection slots, waiting within
// ctx.
func (u *upstream) acquire(ctx context.Context) (func(), error) {
	if u.slots == nil {
		return func() {}, nil
	}
	select {
	case u.slots <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-u.slots }) }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("registry: waiting for a connection slot (max_connections): %w", ctx.Err())
	}
}

// slotBody releases the connection slot when the body is closed.
type slotBody struct {
	io.Reader
	closer  io.Closer
	release func()
}

func (b *slotBody) Close() error {
	err := b.closer.Close()
	b.release()
	return err
}
