package front

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/sdk/policy"
)

// A client request is decided once, on arrival, before anything reads it:
// its host as keyed, its path without dot segments, the fields its
// Connection header names removed. What the key, the variants, the bypass
// rules and the policy choice read from then on is what the origin and the
// owner are sent. Nothing a client lists in Connection can delete a field
// the node reads or sets: naming one is refused.

// refusal is why an arriving request is answered without being served: the
// status, and a message that names the problem.
type refusal struct {
	status int
	msg    string
}

// arrive normalises r in place, matches its policy, extends its
// forwarded chain and gives it its id (below), and returns the
// client's address and the id; a non-nil refusal says the request is
// answered with it instead.
func (f *Front) arrive(r *http.Request) (*policy.Policy, string, string, *refusal) {
	p, refused := f.check(r)
	client, id := f.forwardedFor(r)
	return p, client, id, refused
}

// check is the part of arrive that may refuse the request: its method and
// target, its host, its path, its Connection, its Via.
func (f *Front) check(r *http.Request) (*policy.Policy, *refusal) {
	if r.Method == http.MethodConnect {
		return nil, &refusal{http.StatusNotImplemented, "shardcache: CONNECT is not served: the node is a gateway to its origins, not a forward proxy"}
	}
	if msg := targetError(r.URL, r.RequestURI); msg != "" {
		return nil, &refusal{http.StatusBadRequest, "shardcache: " + msg}
	}
	if r.URL.Path == "" {
		r.URL.Path = "/" // an absolute URL's empty path
	}
	host, err := keyedHost(r.Host)
	if err != nil {
		return nil, &refusal{http.StatusBadRequest, "shardcache: " + err.Error()}
	}
	// The key leaves the port out, so the port the origin is sent (Host
	// under origin_host client, X-Forwarded-Host, Forwarded) is never the
	// client's: links an origin built from one client's :1337 would be
	// served, from the cache, to every client of the host. It is the port
	// clients reach the node on, the same for every client.
	name, _ := splitPort(host)
	if name != "" && f.cfg.PublicPort != nil { // an HTTP/1.0 request may name no host: it is sent none
		name += f.cfg.PublicPort()
	}
	r.Host = name
	if strings.Contains(r.URL.Path, "/.") {
		if paramDotSegment(r.URL.Path) {
			return nil, &refusal{http.StatusBadRequest, "shardcache: a path segment is a dot segment with a parameter (\"..;\" or \".;\"), which some origins (Tomcat, Jetty, Spring) resolve as \"..\" and \".\": the key would name another resource than the origin serves"}
		}
		p, ok := removeDotSegments(r.URL.Path)
		if !ok {
			return nil, &refusal{http.StatusBadRequest, "shardcache: the path climbs above the root"}
		}
		r.URL.Path, r.URL.RawPath = p, ""
	}
	// One spelling of the escapes: the key, the origin and a purge see the
	// same URL for /%7Eu and /~u.
	policy.NormalURL(r.URL)
	p := f.cfg.Policies.Load().Match(policy.Host(r), r.URL.Path) // by name: a policy's hosts carry no port, nor does the key
	if named := removeHopByHop(r.Header, p); named != "" {
		return nil, &refusal{http.StatusBadRequest, "shardcache: Connection names " + named +
			", a field the cache reads: a hop-by-hop field must not be one the request is keyed or forwarded by"}
	}
	if loop := f.viaLoop(r.Header); loop != "" {
		return nil, &refusal{http.StatusLoopDetected, "shardcache: " + loop}
	}
	return p, nil
}

// targetError names what keeps u, the URL of request target target, from
// naming a resource of the node's origins, or is empty when nothing does.
// The node serves origin-form targets and absolute-form http and https
// URLs (RFC 9112 3.2). A target a parser reads as something else (GET victim:80 is the opaque
// URL "victim:80" to Go's parser) would be keyed apart from the path the
// origin is sent, and the asterisk-form asks about the server, not a
// resource, so nginx refuses both; so does the node.
func targetError(u *url.URL, target string) string {
	switch {
	case u.Opaque != "" || u.Path == "" && u.Scheme == "" || u.Path != "" && u.Path[0] != '/' && u.Path != "*":
		return "the request target " + quote(target) + " is neither a path nor an http URL"
	case u.Path == "*":
		return "the request target * (asterisk-form) asks about the server as a whole; the node answers for its origins' resources only: ask OPTIONS of a path"
	case u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https":
		return "the request target's scheme " + quote(u.Scheme) + " is not http or https"
	case u.User != nil:
		return "the request target names a user (userinfo); an http URL carries none (RFC 9110 4.2.4)"
	}
	return ""
}

// splitPort splits a Host field at its port's colon, if it has one.
func splitPort(h string) (host, port string) {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		return h[:i], h[i+1:]
	}
	return h, ""
}

// keyedHost is a Host field as the cache keys it: lower case, without a
// trailing dot, its port kept when it is a number (check then puts the
// node's public port in its place); one that is not a number is refused.
// So is a byte a host may not hold (hostChars), whichever protocol or
// form of target named the host: the origin is sent a host in ASCII (Go's
// client writes café.example as xn--caf-dma.example), so a key and a
// policy match made of any other bytes would name another host than the
// one the origin serves.
func keyedHost(h string) (string, error) {
	for i := 0; i < len(h); i++ {
		if !hostChars[h[i]] {
			return "", hostError("the host " + strconv.QuoteToASCII(h[:min(len(h), 64)]) +
				" holds a byte a host may not (RFC 3986 3.2.2); an internationalised name is sent in its ASCII form (xn--)")
		}
	}
	host, port := splitPort(h)
	if len(port) > 5 {
		return "", errBadPort(h)
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", errBadPort(h)
		}
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") || net.ParseIP(host[1:len(host)-1]) == nil {
			return "", hostError("Host " + quote(h) + " is not an IPv6 literal")
		}
	}
	host = strings.ToLower(strings.TrimRight(host, "."))
	if port != "" {
		return host + ":" + port, nil
	}
	return host, nil
}

// hostChars are the bytes a host and its port may hold: a reg-name's
// letters, digits and sub-delims (RFC 3986 3.2.2), the port's colon, an
// IPv6 literal's brackets. Not '%': no client escapes a host name.
var hostChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "-._~!$&'()*+,;=:[]" {
		t[c] = true
	}
	return t
}()

type hostError string

func (e hostError) Error() string { return string(e) }

func errBadPort(h string) error {
	return hostError("the port of Host " + quote(h) + " is not a number")
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + s + `"`
}

// connectionFields are the hop-by-hop fields a request never carries past
// the node that received it (RFC 9110 7.6.1), beside those its Connection
// names. Upgrade stays until the request is routed: it sends the request
// around the cache, and the origin request drops it.
var connectionFields = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer"}

// readFields are the request fields (canonical) the node reads to key,
// route, negotiate, revalidate or forward a request: a Connection that
// names one is refused.
var readFields = map[string]bool{
	"Host": true, "Content-Length": true, "Content-Type": true, "Content-Encoding": true,
	"Accept": true, "Accept-Encoding": true, "Accept-Language": true, "Accept-Charset": true,
	"Authorization": true, "Cookie": true, "Cache-Control": true, "Pragma": true, "Range": true, "If-Range": true,
	"If-Match": true, "If-None-Match": true, "If-Modified-Since": true, "If-Unmodified-Since": true,
	"Via": true, "Max-Forwards": true, "Surrogate-Key": true, "Cache-Tag": true, "X-Purge-All": true, "X-Request-Id": true,
}

// removeHopByHop deletes the hop-by-hop fields of an arriving request and
// those its Connection names. It returns, deleting nothing, the first
// named field the node reads: one of readFields, a forwarded or rewrite
// field, an internal one, or one p keys or varies by.
func removeHopByHop(h http.Header, p *policy.Policy) string {
	conn := h["Connection"]
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			tok = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(tok))
			if tok != "" && protectedField(tok, p) {
				return tok
			}
		}
	}
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(tok)); tok != "Upgrade" {
				delete(h, tok)
			}
		}
	}
	for _, k := range connectionFields {
		delete(h, k)
	}
	return ""
}

// protectedField reports whether canonical field k is one a Connection
// may not name.
func protectedField(k string, p *policy.Policy) bool {
	if readFields[k] || rewriteField(k) || strings.HasPrefix(k, hop.Prefix) {
		return true
	}
	for _, f := range p.Fields() {
		if strings.EqualFold(f, k) {
			return true
		}
	}
	return false
}

// maxVia bounds the proxies a request may have passed through (its Via
// elements) before it reaches a node: past it the request is taken for a
// loop, as one through this cluster's own nodes is.
const maxVia = 16

// viaLoop says why a request's Via shows it looping ("" when it does not):
// it names a member of this node's ring, or more than maxVia proxies.
func (f *Front) viaLoop(h http.Header) string {
	vals := h["Via"]
	if len(vals) == 0 {
		return ""
	}
	rt := f.cfg.Routes.Load()
	n := 0
	for _, v := range vals {
		for elem := range strings.SplitSeq(v, ",") {
			n++
			_, by, _ := strings.Cut(strings.TrimSpace(elem), " ")
			by, _, _ = strings.Cut(strings.TrimSpace(by), " ")
			if by == f.cfg.Via || rt.ViaMember(by) {
				return "the request has passed through " + by + ", a node of this cluster, already: a policy's origin leads back to the cluster"
			}
		}
	}
	if n > maxVia {
		return "the request has passed through more than 16 proxies (Via): a forwarding loop"
	}
	return ""
}

// progressBody is a client's request body that must keep coming: each
// read waits at most wait for the client's next bytes (the connection's
// read deadline, renewed by every read), never bounding the upload's
// length. At its end the deadline is cleared, so that it does not cut the
// connection while the answer is sent. A body that stops coming fails
// (stalled is set) and the connection closes after the answer: what is
// left of the body would be read as the next request.
type progressBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	header  http.Header // the answer's, to close the connection after it
	wait    time.Duration
	renewed time.Time
	done    bool
	stalled bool
}

func (b *progressBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	if now := time.Now(); now.Sub(b.renewed) >= min(b.wait/8, time.Second) {
		b.renewed = now
		b.rc.SetReadDeadline(now.Add(b.wait))
	}
	n, err := b.ReadCloser.Read(p)
	switch ne, _ := err.(net.Error); {
	case err == io.EOF:
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	case ne != nil && ne.Timeout():
		b.stalled = true
		b.header.Set("Connection", "close")
	}
	return n, err
}

// bodyStalled reports whether r's body stopped coming for the body timeout.
func bodyStalled(r *http.Request) bool {
	b, ok := r.Body.(*progressBody)
	return ok && b.stalled
}

// forwardedFor extends the request's forwarded chain with the address it
// came from, as the receiving node: X-Forwarded-For and Forwarded gain it,
// X-Real-IP names the client. Incoming values are kept only from a trusted
// proxy; from anyone else they are dropped, never believed. It returns the
// client's address, the nearest one in the chain that is not a trusted
// proxy, and the request's id, set as its X-Request-Id.
func (f *Front) forwardedFor(r *http.Request) (string, string) {
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
	trusted := f.trusted(peer)
	if !trusted {
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
	vals := make([]string, 6)
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
	// The request's id: a trusted proxy's, or a PURGE's (its purge's id,
	// which the control plane checks), kept as sent; else a new one,
	// written after the Forwarded element so that one allocation holds
	// both.
	sent := h["X-Request-Id"]
	keep := len(sent) == 1 && validRequestID(sent[0]) && (trusted || r.Method == "PURGE")
	var idBuf [idLen]byte
	newID := idBuf[:0]
	if !keep {
		f.ids.put(&idBuf)
		newID = idBuf[:]
	}
	elem := "for=" + node + ";proto=" + scheme + string(newID)
	if r.Host != "" {
		elem = "for=" + node + ";host=" + forwardedValue(r.Host) + ";proto=" + scheme + string(newID)
	}
	cut := len(elem) - len(newID)
	elem, id := elem[:cut], elem[cut:]
	if prior := strings.Join(h["Forwarded"], ", "); prior != "" {
		vals[1] = prior + ", " + elem
	} else {
		vals[1] = elem
	}
	h["Forwarded"] = vals[1:2:2]
	if len(h["X-Forwarded-Host"]) == 0 && r.Host != "" { // kept from a trusted proxy, else dropped above
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
	switch {
	case keep:
		id = sent[0]
	case len(sent) > 0 && r.Method == "PURGE":
		return client, id // its id as sent, for the control plane to refuse
	}
	vals[5] = id
	h["X-Request-Id"] = vals[5:6:6]
	return client, id
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

// paramDotSegment reports whether a segment of path p is "." or ".."
// followed by a parameter (";..."): /static/..;/account is /account to
// Tomcat, /static/..;/account to the key and the policy.
func paramDotSegment(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if before, _, found := strings.Cut(seg, ";"); found && (before == "." || before == "..") {
			return true
		}
	}
	return false
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

// Request ids. Every client request has one (X-Request-Id): the one a
// trusted proxy sent, or a PURGE's own (the id its purge is recorded
// under), else one the node assigns. It goes on with the request (to the
// owner over the peer hop, and to the origin), comes back on the answer,
// and is in the access log, the log streams and the trace.

// requestIDs assigns ids unique to a node's run: a random prefix, drawn
// when the node starts, and a count.
type requestIDs struct {
	prefix [8]byte
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [4]byte
	rand.Read(b[:])
	g := &requestIDs{}
	hex.Encode(g.prefix[:], b[:])
	return g
}

// idLen is the length of the ids the node assigns.
const idLen = 21

// put writes a new id into b: the prefix, a dash, the count in 12 hex
// digits (it wraps after 2^48 requests).
func (g *requestIDs) put(b *[idLen]byte) {
	const digits = "0123456789abcdef"
	copy(b[:], g.prefix[:])
	b[8] = '-'
	n := g.n.Add(1)
	for i := len(b) - 1; i > 8; i-- {
		b[i] = digits[n&15]
		n >>= 4
	}
}

// maxRequestID bounds a request id taken from a request.
const maxRequestID = 128

// validRequestID reports whether id may be taken from a request as its
// id: 1 to maxRequestID letters, digits and ._:- starting with a letter or
// digit, as the control plane takes a purge's id.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != ':' && c != '-') {
			return false
		}
	}
	return true
}
