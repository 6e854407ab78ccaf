// Package httpcache holds the HTTP caching rules of RFC 9110, 9111 and 9213
// as pure functions of header fields, with no I/O and the clock passed in:
// whether a shared cache may store a response and for how long it stays
// fresh, conditional requests, byte ranges, content codings and Vary keys.
// It imports nothing of the project: the node's read path asks it, and it
// is tested on its own.
package httpcache

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Directives are parsed Cache-Control directives, names lower-cased; a
// directive without an argument maps to "".
type Directives map[string]string

// ParseCacheControl parses every Cache-Control field value of h. Unknown
// directives are kept and ignored by callers; malformed ones are skipped.
func ParseCacheControl(h http.Header) Directives {
	d := Directives{}
	for _, line := range h.Values("Cache-Control") {
		for part := range strings.SplitSeq(line, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			name, arg, _ := strings.Cut(part, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			arg = strings.Trim(strings.TrimSpace(arg), `"`)
			if _, seen := d[name]; !seen { // RFC 9111 4.2.1: the first occurrence wins
				d[name] = arg
			}
		}
	}
	return d
}

// Has reports whether directive name is present.
func (d Directives) Has(name string) bool {
	_, ok := d[name]
	return ok
}

// Seconds returns a delta-seconds argument; ok is false when absent or invalid.
func (d Directives) Seconds(name string) (time.Duration, bool) {
	v, ok := d[name]
	if !ok {
		return 0, false
	}
	return parseDelta(v)
}

// parseDelta parses delta-seconds (RFC 9111 1.2.2): digits only, capped at
// 2^31 seconds when larger.
func parseDelta(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	const maxSeconds = int64(1<<31 - 1)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil { // only overflow is left
		n = maxSeconds
	}
	return time.Duration(min(n, maxSeconds)) * time.Second, true
}

// ForRequest parses a request's Cache-Control; without one, "Pragma:
// no-cache" means no-cache (RFC 9111 5.4).
func ForRequest(h http.Header) Directives {
	d := ParseCacheControl(h)
	if len(h.Values("Cache-Control")) == 0 {
		for _, v := range h.Values("Pragma") {
			if strings.Contains(strings.ToLower(v), "no-cache") {
				d["no-cache"] = ""
			}
		}
	}
	return d
}

// MustRevalidate reports whether a stale response may never be served
// without revalidation: must-revalidate, or for a shared cache
// proxy-revalidate and s-maxage (RFC 9111 5.2.2.2, 5.2.2.8, 5.2.2.10), or
// no-cache (revalidate on every use).
func (d Directives) MustRevalidate() bool {
	return d.Has("must-revalidate") || d.Has("proxy-revalidate") || d.Has("s-maxage") || d.Has("no-cache")
}

// heuristicStatuses are cacheable by default (RFC 9110 15.1), so heuristic
// freshness applies to them.
var heuristicStatuses = map[int]bool{200: true, 203: true, 204: true, 206: true, 300: true, 301: true, 308: true, 404: true, 405: true, 410: true, 414: true, 501: true}

// understoodStatuses are the final statuses RFC 9110 (15) defines, whose
// caching rules this cache implements: what must-understand asks of it.
var understoodStatuses = map[int]bool{
	200: true, 201: true, 202: true, 203: true, 204: true, 205: true, 206: true,
	300: true, 301: true, 302: true, 303: true, 304: true, 305: true, 307: true, 308: true,
	400: true, 401: true, 402: true, 403: true, 404: true, 405: true, 406: true, 407: true, 408: true, 409: true,
	410: true, 411: true, 412: true, 413: true, 414: true, 415: true, 416: true, 417: true, 421: true, 422: true, 426: true,
	500: true, 501: true, 502: true, 503: true, 504: true, 505: true,
}

// Forbidden reports whether the response forbids a shared cache to store
// it: no-store, private (unless allowPrivate), or Vary: *. A no-cache
// response may be stored; it is revalidated on every use.
func Forbidden(h http.Header, allowPrivate bool, targeted ...string) bool {
	return forbidden(h, allowPrivate, targeted...) != ""
}

// forbidden is why Forbidden forbids storing (a Reason), or "".
func forbidden(h http.Header, allowPrivate bool, targeted ...string) string {
	cc, _ := ResponseControl(h, targeted...)
	// must-understand (RFC 9111 5.2.2.3) overrides no-store for a cache
	// that understands the status; Storable refuses, under
	// must-understand, the statuses it does not understand.
	switch {
	case cc.Has("no-store") && !cc.Has("must-understand"):
		return ReasonNoStore
	case cc.Has("private") && !allowPrivate:
		return ReasonPrivate
	}
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(f) == "*" {
				return ReasonVaryStar
			}
		}
	}
	return ""
}

// Explicit reports whether the response states its freshness (s-maxage,
// max-age or Expires; a targeted field's s-maxage or max-age, Expires
// ignored), which takes precedence over a policy's TTLs as response
// headers do over nginx's proxy_cache_valid.
func Explicit(h http.Header, targeted ...string) bool {
	cc, fromTargeted := ResponseControl(h, targeted...)
	return cc.Has("s-maxage") || cc.Has("max-age") || !fromTargeted && h.Get("Expires") != ""
}

// Overrides are what a cache policy changes of RFC 9111's storage rules.
type Overrides struct {
	// TTL: the policy gives the response a lifetime it does not state
	// (a status TTL or a default TTL), which makes any status storable.
	TTL bool
	// StorePrivate and StoreSetCookie store what a shared cache would not.
	StorePrivate, StoreSetCookie bool
	// Excluded: the policy never stores this status.
	Excluded bool
	// Heuristic: the policy gives this status heuristic freshness, as if it
	// were cacheable by default.
	Heuristic bool
}

// Storable is the one rule of whether a shared cache may store a response
// (RFC 9111 3) with this status and header, to a request that carried
// Authorization when authorized, under a policy's overrides. Whether it is
// worth storing (a lifetime or a validator to serve it with) is the
// caller's to add.
//
// targeted names the policy's own targeted fields (RFC 9213), checked
// before CDN-Cache-Control; the first valid one replaces Cache-Control and
// Expires here and in Lifetime, Decide and StaleOnError.
func Storable(status int, h http.Header, authorized bool, o Overrides, targeted ...string) bool {
	return Unstorable(status, h, authorized, o, targeted...) == ""
}

// Unstorable is why Storable refuses a response (a Reason), or "" when it
// may be stored.
func Unstorable(status int, h http.Header, authorized bool, o Overrides, targeted ...string) string {
	// A status the cache does not understand is not stored; a 206 is stored
	// only as a slice of a whole, a 304 only merged into what it confirms.
	switch {
	case o.Excluded:
		return ReasonExcluded
	case status < 200 || status >= 600 || status == http.StatusPartialContent || status == http.StatusNotModified:
		return ReasonStatus
	}
	if why := forbidden(h, o.StorePrivate, targeted...); why != "" {
		return why
	}
	if !o.StoreSetCookie && len(h.Values("Set-Cookie")) > 0 {
		return ReasonSetCookie
	}
	cc, _ := ResponseControl(h, targeted...)
	// must-understand limits storing to a cache that implements the
	// status's caching rules (RFC 9111 3, 5.2.2.3): those of RFC 9110's
	// statuses, whatever no-store says.
	if cc.Has("must-understand") && !understoodStatuses[status] {
		return ReasonMustUnderstand
	}
	// Other statuses than the heuristically cacheable ones only with
	// explicit freshness or public (RFC 9111 3), or a policy's TTL.
	if !heuristicStatuses[status] && !o.Heuristic && !Explicit(h, targeted...) && !cc.Has("public") && !o.TTL {
		return ReasonStatus
	}
	// RFC 9111 3.5: to an authorized request, only what the response
	// explicitly shares.
	if authorized && !cc.Has("public") && !cc.Has("s-maxage") && !cc.Has("must-revalidate") {
		return ReasonAuthorization
	}
	return ""
}

// Lifetime returns how long a response stays fresh in a shared cache, from
// s-maxage, max-age, Expires minus Date, or 10 % of the time since
// Last-Modified (heuristic freshness, only for statuses that allow it and
// when the response gives no explicit freshness).
func Lifetime(status int, h http.Header, received time.Time, targeted ...string) time.Duration {
	return LifetimeHeuristic(status, h, received, false, targeted...)
}

// LifetimeHeuristic is Lifetime with heuristic freshness for status also
// when it is not cacheable by default, as a policy may allow.
func LifetimeHeuristic(status int, h http.Header, received time.Time, heuristic bool, targeted ...string) time.Duration {
	cc, fromTargeted := ResponseControl(h, targeted...)
	if cc.Has("no-cache") {
		return 0 // stored, but revalidated on every use
	}
	// An invalid s-maxage or max-age makes the response stale (RFC 9111
	// 4.2.1), rather than falling back to Expires.
	for _, name := range []string{"s-maxage", "max-age"} {
		if cc.Has(name) {
			d, _ := cc.Seconds(name)
			return d
		}
	}
	date := received
	if v := h.Get("Date"); v != "" {
		if t, ok := ParseDate(v); ok {
			date = t
		}
	}
	if v := h.Values("Expires"); len(v) > 0 && !fromTargeted {
		// An invalid Expires, or several, means already expired (RFC 9111
		// 5.3): the date is parsed strictly, never guessed at.
		t, ok := ParseDate(v[0])
		if !ok || len(v) > 1 {
			return 0
		}
		return max(t.Sub(date), 0)
	}
	if !heuristicStatuses[status] && !heuristic {
		return 0
	}
	if v := h.Get("Last-Modified"); v != "" {
		if t, ok := ParseDate(v); ok && t.Before(date) {
			return date.Sub(t) / 10
		}
	}
	return 0
}

// InitialAge is the age a response already had when received (RFC 9111
// 4.2.3): the larger of its apparent age (received minus Date) and its Age
// plus the response delay (received minus requested). An Age holding a
// list, on one line or several, counts by its first member (RFC 9111 5.1);
// an invalid Age is ignored.
func InitialAge(h http.Header, requested, received time.Time) time.Duration {
	age := time.Duration(0)
	if v := firstMember(h.Values("Age")); v != "" {
		if d, ok := parseDelta(v); ok {
			age = d + max(received.Sub(requested), 0)
		}
	}
	if v := h.Get("Date"); v != "" {
		if t, ok := ParseDate(v); ok {
			age = max(age, received.Sub(t))
		}
	}
	return age
}

// firstMember is the first non-empty member of a list field's lines (RFC
// 9110 5.6.1: empty members are skipped), trimmed; "" when there is none.
func firstMember(lines []string) string {
	for _, line := range lines {
		for m := range strings.SplitSeq(line, ",") {
			if m = strings.TrimSpace(m); m != "" {
				return m
			}
		}
	}
	return ""
}
