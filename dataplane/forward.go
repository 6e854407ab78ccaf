package dataplane

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/sdk/policy"
)

// forwardedFor extends the request's forwarded chain with the address it
// came from, as the receiving node: X-Forwarded-For and Forwarded gain it,
// X-Real-IP names the client. Incoming values are kept only from a trusted
// proxy; from anyone else they are dropped, never believed. It returns the
// client's address: the nearest one in the chain that is not a trusted
// proxy.
func (n *Node) forwardedFor(r *http.Request) string {
	h := r.Header
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, _ := netip.ParseAddr(host)
	peer = peer.Unmap()
	if !n.trusted(peer) {
		h.Del("X-Forwarded-For")
		h.Del("Forwarded")
		h.Del("X-Real-Ip")
		for _, f := range rewriteHeaders {
			h.Del(f)
		}
	}
	var chain []string
	for _, v := range h.Values("X-Forwarded-For") {
		for a := range strings.SplitSeq(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				chain = append(chain, a)
			}
		}
	}
	chain = append(chain, peer.String())
	h.Set("X-Forwarded-For", strings.Join(chain, ", "))
	node := peer.String()
	if peer.Is6() {
		node = `"[` + node + `]"`
	}
	if prior := strings.Join(h.Values("Forwarded"), ", "); prior != "" {
		h.Set("Forwarded", prior+", for="+node)
	} else {
		h.Set("Forwarded", "for="+node)
	}
	client := chain[0]
	for i := len(chain) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(chain[i])
		if err != nil || !n.trusted(a.Unmap()) {
			client = chain[i]
			break
		}
	}
	h.Set("X-Real-Ip", client)
	return client
}

// rewriteHeaders are request fields that origins and their frameworks
// read as the request's real host, scheme, port, path or method. None is
// part of a cache key, so a client could use one to have a poisoned answer
// stored under a key other clients read: they are taken only from trusted
// proxies.
var rewriteHeaders = []string{"X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Scheme",
	"X-Forwarded-Server", "X-Forwarded-Prefix", "X-Original-Url", "X-Rewrite-Url", "X-Original-Host", "X-Host",
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// removeDotSegments resolves "." and ".." segments in an absolute path
// (RFC 3986 5.2.4), so that one resource has one cache key; ok is false
// when ".." would climb above the root. Other segments, empty ones among
// them, are kept as they are.
func removeDotSegments(p string) (string, bool) {
	segs := strings.Split(p, "/")[1:] // p starts with "/"
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
		case "..":
			if len(out) == 0 {
				return "", false
			}
			out = out[:len(out)-1]
		default:
			out = append(out, s)
			continue
		}
		if last {
			out = append(out, "") // "/a/." is "/a/"
		}
	}
	return "/" + strings.Join(out, "/"), true
}

// trusted reports whether a is one of the configured trusted proxies.
func (n *Node) trusted(a netip.Addr) bool {
	for _, p := range n.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// logAccess writes the request's access-log line, one JSON object, when
// the access log is on and the request is sampled; 5xx answers are always
// logged.
func (n *Node) logAccess(r *http.Request, rec *recorder, client, route, cache string, start time.Time, elapsed time.Duration) {
	if n.access == nil || rec.status < 500 && n.cfg.AccessLogSample < 1 && rand.Float64() >= n.cfg.AccessLogSample {
		return
	}
	n.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.Time("start", start),
		slog.String("client", client),
		slog.String("forwarded_for", r.Header.Get("X-Forwarded-For")),
		slog.String("method", r.Method),
		slog.String("host", r.Host),
		slog.String("path", r.URL.RequestURI()),
		slog.Int("status", rec.status),
		slog.Int64("bytes", rec.bytes),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
		slog.String("cache", cache),
		slog.String("route", route),
		slog.String("served_by", rec.Header().Get("X-Cache-Node")),
		slog.String("node", n.cfg.ID),
		slog.String("trace_id", traceID(r.Context())),
	)
}

func unsafeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// invalidate drops what the cluster stores for r's target URI and the
// same-host URIs in the response's Location and Content-Location (RFC
// 9111 4.4): here, and on every other member of the ring over the peer
// hop, where the owner and any node holding a hot copy are. It waits up to
// invalidateWait for the peers, so that the client's next request sees the
// change; a slower peer is still told, after the answer.
func (n *Node) invalidate(r *http.Request, h http.Header) {
	var wg sync.WaitGroup
	base := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	targets := []*url.URL{base}
	for _, f := range []string{"Location", "Content-Location"} {
		if v := h.Get(f); v != "" {
			if u, err := base.Parse(v); err == nil && strings.EqualFold(u.Host, base.Host) {
				targets = append(targets, u)
			}
		}
	}
	rt := n.routes.Load()
	for _, u := range targets {
		req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: u.Path, RawQuery: u.RawQuery}, Host: u.Host, Header: http.Header{}}
		p := n.policies.Load().Match(policy.Host(req), req.URL.Path)
		key := p.Key("http", req)
		n.dropLocal(key)
		if p.SliceSize > 0 {
			// Without its head a sliced object is looked up anew; slices
			// of another version are then refused.
			n.dropLocal((&slice.Req{Size: p.SliceSize}).Key(key))
		}
		if rt == nil {
			continue
		}
		hdr := http.Header{relay.HopHeader: {n.cfg.ID}, relay.InvalidateHeader: {"1"}, relay.SchemeHeader: {"http"}}
		for _, m := range rt.epoch.GetMembers() {
			if m.GetId() == n.cfg.ID {
				continue
			}
			wg.Add(1)
			n.background("invalidate", func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(n.fillCtx, 5*time.Second)
				defer cancel()
				resp, err := n.peers.Forward(ctx, m.GetPeerAddress(), req, hdr)
				if err != nil {
					n.log.Warn("invalidation did not reach a peer", "peer", m.GetId(), "url", u.String(), "err", err)
					return
				}
				resp.Body.Close()
			})
		}
	}
	done := make(chan struct{})
	n.background("invalidate", func() {
		wg.Wait()
		close(done)
	})
	select {
	case <-done:
	case <-time.After(invalidateWait):
	}
}

// invalidateWait bounds how long an unsafe request's answer waits for the
// peers to drop what it invalidates.
const invalidateWait = time.Second

// dropLocal removes what this node stores under key: the response or
// its variants, and a hot copy.
func (n *Node) dropLocal(key string) {
	if e, ok := n.store.Get(key); ok && e.Status == varyMarker {
		prefix := httpcache.VariantPrefix(key)
		n.store.Keys(func(k string) bool {
			if strings.HasPrefix(k, prefix) {
				n.store.Delete(k)
			}
			return true
		})
		n.variants.Delete(key)
	}
	n.store.Delete(key)
	if n.hotCopies != nil {
		n.hotCopies.Delete(key)
	}
}
