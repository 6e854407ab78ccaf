package front

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// forwardedFor extends the request's forwarded chain with the address it
// came from, as the receiving node: X-Forwarded-For and Forwarded gain it,
// X-Real-IP names the client. Incoming values are kept only from a trusted
// proxy; from anyone else they are dropped, never believed. It returns the
// client's address: the nearest one in the chain that is not a trusted
// proxy.
func (f *Front) forwardedFor(r *http.Request) string {
	h := r.Header
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, _ := netip.ParseAddr(host)
	peer = peer.Unmap()
	if !f.trusted(peer) {
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
		if err != nil || !f.trusted(a.Unmap()) {
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
func (f *Front) trusted(a netip.Addr) bool {
	for _, p := range f.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
