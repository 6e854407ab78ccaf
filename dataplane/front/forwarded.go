package front

import (
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/shardcache/shardcache/dataplane/hop"
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
	// The hop headers mean something only on the peer listener: a client
	// sending them is ignored, never trusted. The forwarded chain and the
	// rewrite fields are kept from trusted proxies only. One pass over the
	// header's keys does both.
	var drop func(string) bool
	if !f.trusted(peer) {
		drop = rewriteField
	}
	hop.Strip(h, drop)
	var buf [4]string
	chain := buf[:0]
	// The keys are canonical: the fields are read and set without
	// Header's canonicalisation, which every request would pay.
	for _, v := range h["X-Forwarded-For"] {
		for a := range strings.SplitSeq(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				chain = append(chain, a)
			}
		}
	}
	node := peer.String()
	chain = append(chain, node)
	// One array backs the fields set here.
	vals := make([]string, 5)
	vals[0] = node
	if len(chain) > 1 {
		vals[0] = strings.Join(chain, ", ")
	}
	h["X-Forwarded-For"] = vals[0:1:1]
	if peer.Is6() {
		node = `"[` + node + `]"`
	}
	// The host and scheme the client asked for (RFC 7239 5.3, 5.4), so
	// that an origin builds the URLs it answers with for the cluster, not
	// for itself.
	scheme := hop.Scheme(r)
	elem := "for=" + node + ";proto=" + scheme
	if r.Host != "" {
		elem = "for=" + node + ";host=" + forwardedValue(r.Host) + ";proto=" + scheme
	}
	if prior := strings.Join(h["Forwarded"], ", "); prior != "" {
		vals[1] = prior + ", " + elem
	} else {
		vals[1] = elem
	}
	h["Forwarded"] = vals[1:2:2]
	if len(h["X-Forwarded-Host"]) == 0 { // kept from a trusted proxy, else dropped above
		vals[3] = r.Host
		h["X-Forwarded-Host"] = vals[3:4:4]
	}
	if len(h["X-Forwarded-Proto"]) == 0 {
		vals[4] = scheme
		h["X-Forwarded-Proto"] = vals[4:5:5]
	}
	client := chain[0]
	for i := len(chain) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(chain[i])
		if err != nil || !f.trusted(a.Unmap()) {
			client = chain[i]
			break
		}
	}
	vals[2] = client
	h["X-Real-Ip"] = vals[2:3:3]
	return client
}

// rewriteFields are the request fields (canonical) taken only from
// trusted proxies, beside every X-Forwarded-* field: the forwarded chain,
// and the rewrite fields that origins and their frameworks read as the
// request's real client, host, scheme, port, path or method. None of those
// is part of a cache key, so a client could use one to have a poisoned
// answer stored under a key other clients read.
var rewriteFields = map[string]bool{"Forwarded": true, "X-Real-Ip": true, "True-Client-Ip": true, "Cf-Connecting-Ip": true,
	"Fastly-Client-Ip": true, "X-Client-Ip": true, "X-Cluster-Client-Ip": true,
	"X-Original-Url": true, "X-Original-Uri": true, "X-Rewrite-Url": true, "X-Original-Host": true, "X-Host": true,
	"X-Http-Host-Override": true, "X-Url-Scheme": true, "X-Scheme": true, "Front-End-Https": true,
	"X-Http-Method-Override": true, "X-Http-Method": true, "X-Method-Override": true}

// rewriteField reports whether canonical key k is a forwarded or rewrite
// field in any spelling: one of rewriteFields or X-Forwarded-*, also with
// underscores for dashes (X_Forwarded_Host), which some frameworks read
// as the dashed field.
func rewriteField(k string) bool {
	if strings.IndexByte(k, '_') >= 0 {
		k = textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(k, "_", "-"))
	}
	return rewriteFields[k] || strings.HasPrefix(k, "X-Forwarded-")
}

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

// forwardedValue is v as a Forwarded parameter value: a token as it is,
// anything else (a host with a port) quoted.
func forwardedValue(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return strconv.Quote(v)
		}
	}
	return v
}
