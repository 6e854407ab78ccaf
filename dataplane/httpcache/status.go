package httpcache

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cache-Status (RFC 9211) and Proxy-Status (RFC 9209): the standard
// account of what each cache did with a request, beside X-Cache. Each
// node that handles a response adds one member; the owner's comes first,
// then the relaying node's, closest to the client last.

// StatusMember is one cache's Cache-Status member.
type StatusMember struct {
	Node   string // the node's name, a Token or String item (SFItem)
	Cache  string // the X-Cache value the node answered with; COLLAPSED for a share of another request's fill
	Status int    // the origin's status, when the node went forward; 0 for none
	Stored bool   // the response forwarded was stored
	TTL    time.Duration
	HasTTL bool   // the response is stored: TTL is its freshness left (negative when stale)
	Key    string // the cache key, when a policy shows it
	Detail string // a token, for what the fields above do not say
}

// Append adds m to b as RFC 9211 writes it.
func (m StatusMember) Append(b []byte) []byte {
	b = append(b, m.Node...)
	switch m.Cache {
	case "HIT", "STALE", "UPDATING":
		b = append(b, "; hit"...)
	case "MISS", "COLLAPSED":
		if m.Detail == ReasonVaryMiss {
			b = append(b, "; fwd=vary-miss"...) // the URI is stored, not this variant
		} else {
			b = append(b, "; fwd=uri-miss"...)
		}
	case "EXPIRED", "REVALIDATED":
		b = append(b, "; fwd=stale"...)
	case "PARTIAL":
		b = append(b, "; fwd=partial"...)
	case "BYPASS":
		b = append(b, "; fwd=bypass"...)
	case "METHOD":
		b = append(b, "; fwd=method"...)
	case "REQUEST":
		b = append(b, "; fwd=request"...)
	default:
		b = append(b, "; fwd=miss"...)
	}
	if m.Status > 0 {
		b = append(b, "; fwd-status="...)
		b = strconv.AppendInt(b, int64(m.Status), 10)
	}
	if m.HasTTL {
		b = append(b, "; ttl="...)
		b = strconv.AppendInt(b, int64(m.TTL/time.Second), 10)
	}
	if m.Stored {
		b = append(b, "; stored"...)
	}
	if m.Cache == "COLLAPSED" {
		b = append(b, "; collapsed"...)
	}
	if m.Key != "" {
		b = append(b, "; key="...)
		b = AppendSFString(b, m.Key)
	}
	switch {
	case m.Detail != "":
		b = append(b, "; detail="...)
		b = append(b, m.Detail...)
	case m.Cache == "STALE":
		// Served past its freshness (ttl 0 or less): said outright, as
		// a ttl rounded to 0 would not.
		b = append(b, "; detail=stale"...)
	}
	return b
}

// String is m as one Cache-Status member.
func (m StatusMember) String() string { return string(m.Append(nil)) }

// SFItem is name as a Structured Field item: a Token when it is one, else
// a String (RFC 8941 3.3.4, 3.3.3).
func SFItem(name string) string {
	token := name != ""
	for i := 0; i < len(name) && token; i++ {
		c := name[i]
		token = isTokenChar(c) && (i > 0 || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*')
	}
	if token {
		return name
	}
	return string(AppendSFString(nil, name))
}

// AppendSFString appends s as a Structured Field String; bytes a String
// cannot hold (outside printable ASCII) are left out.
func AppendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20 && c <= 0x7e:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ProxyStatus is the Proxy-Status member (RFC 9209) of node for a response
// it generated because of err: its error type and, as details, err.
func ProxyStatus(node, errType, details string) string {
	b := append([]byte(node), "; error="...)
	b = append(b, errType...)
	if details != "" {
		b = append(b, "; details="...)
		b = AppendSFString(b, details)
	}
	return string(b)
}

// ErrTransferCoding marks an origin answer whose Transfer-Encoding the
// node cannot parse or decode (errors.Is holds for it): RFC 9209's
// http_response_transfer_coding.
var ErrTransferCoding = errors.New("httpcache: transfer coding not decodable")

// ErrorType names err, from reaching the origin, as an RFC 9209 error
// type.
func ErrorType(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	var cert *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var ne net.Error
	switch {
	case errors.Is(err, ErrTransferCoding):
		return "http_response_transfer_coding"
	case errors.As(err, &dns):
		if dns.IsTimeout {
			return "dns_timeout"
		}
		return "dns_error"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.As(err, &cert) || errors.As(err, &unknown):
		return "tls_certificate_error"
	case errors.As(err, &op) && op.Op == "dial" && (op.Timeout() || errors.Is(err, context.DeadlineExceeded)):
		return "connection_timeout"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() || strings.Contains(err.Error(), "timeout"):
		return "http_response_timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "http_response_incomplete"
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "server closed"):
		return "connection_terminated"
	case errors.As(err, &op) && op.Op == "dial":
		return "destination_unavailable"
	}
	return "proxy_internal_error"
}

// Disconnected reports whether err, from reaching the origin, is the
// origin closing (or resetting) the connection before any answer: the
// cache is then disconnected (RFC 9111 4.2.4; see StaleDisconnected).
func Disconnected(err error) bool {
	return err != nil && ErrorType(err) == "connection_terminated"
}

// ErrorDetails describes err, from reaching the origin, for a client to
// read in Proxy-Status: what failed, never the origin's URL or address,
// which are the cluster's own (they stay in the node's log).
func ErrorDetails(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // "Get \"http://origin.internal/...\": ..." without the URL
	}
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		return "name lookup: " + dns.Err
	case errors.As(err, &op):
		if op.Err != nil {
			return op.Op + ": " + strings.TrimPrefix(op.Err.Error(), op.Op+" ") // no addresses
		}
		return op.Op + " failed"
	}
	s := err.Error()
	if strings.Contains(s, "://") || hostPort.MatchString(s) {
		return "origin request failed"
	}
	return s
}

// hostPort finds an address (host:port) in a message.
var hostPort = regexp.MustCompile(`[A-Za-z0-9.\-\]]:[0-9]{1,5}\b`)

// X-Cache values: how the node that served from its store (X-Cache-Node)
// answered.
const (
	CacheHit    = "HIT"
	CacheMiss   = "MISS"
	CacheBypass = "BYPASS"
	// CacheStale: served past its freshness, because the client allows it
	// (max-stale) or the origin failed (stale-if-error).
	CacheStale = "STALE"
	// CacheUpdating: served stale while one request revalidates it
	// (stale-while-revalidate).
	CacheUpdating = "UPDATING"
	// CacheRevalidated: the origin confirmed the stored response (304).
	CacheRevalidated = "REVALIDATED"
	// CacheExpired: a stored response had expired; the origin sent a new one.
	CacheExpired = "EXPIRED"
	// CachePartial: an answer assembled from slices some of which were
	// stored and some fetched.
	CachePartial = "PARTIAL"
)

// RelayedMember is the Cache-Status member a node adds to an owner's
// answer it relays: it did not serve it from its own store.
func RelayedMember(node string) string {
	return StatusMember{Node: node, Cache: CacheMiss, Detail: "relayed"}.String()
}

// MemberOf is the parameters of the Cache-Status member that cache node
// added among lines (the field's lines, as received): the last one naming
// it. Without one naming node (or with node ""), it is the first member,
// and false.
func MemberOf(lines []string, node string) (map[string]string, bool) {
	var first, found map[string]string
	for _, v := range lines {
		ms, ok := ParseList(v)
		if !ok {
			continue
		}
		for _, m := range ms {
			if first == nil {
				first = m.Params
			}
			if node != "" && m.Item == node {
				found = m.Params
			}
		}
	}
	if found != nil {
		return found, true
	}
	return first, false
}
