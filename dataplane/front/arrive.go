package front

import (
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
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

// arrive normalises r in place and matches its policy; a non-nil refusal
// says the request is answered with it instead.
func (f *Front) arrive(r *http.Request) (*policy.Policy, *refusal) {
	host, err := keyedHost(r.Host)
	if err != nil {
		return nil, &refusal{http.StatusBadRequest, "shardcache: " + err.Error()}
	}
	r.Host = host
	if strings.Contains(r.URL.Path, "/.") {
		p, ok := removeDotSegments(r.URL.Path)
		if !ok {
			return nil, &refusal{http.StatusBadRequest, "shardcache: the path climbs above the root"}
		}
		r.URL.Path, r.URL.RawPath = p, ""
	}
	p := f.cfg.Policies.Load().Match(host, r.URL.Path)
	if named := removeHopByHop(r.Header, p); named != "" {
		return nil, &refusal{http.StatusBadRequest, "shardcache: Connection names " + named +
			", a field the cache reads: a hop-by-hop field must not be one the request is keyed or forwarded by"}
	}
	if loop := f.viaLoop(r.Header); loop != "" {
		return nil, &refusal{http.StatusLoopDetected, "shardcache: " + loop}
	}
	return p, nil
}

// keyedHost is a Host field as the cache keys it and sends it on: lower
// case, without a trailing dot, its port (which the key leaves out) kept
// when it is a number, so that an origin building links for the node the
// client reached builds them right. A port that is not a number is
// refused: it is no port, and an origin building links from the Host
// would put it in them for every client sharing the key.
func keyedHost(h string) (string, error) {
	host, port := h, ""
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		host, port = h[:i], h[i+1:]
	}
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
