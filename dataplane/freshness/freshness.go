// Package freshness decides, by RFC 9111, whether a shared cache may store a
// response and for how long it stays fresh.
package freshness

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
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	const maxSeconds = int64(1<<31 - 1) // RFC 9111 1.2.2: cap at 2^31 seconds
	return time.Duration(min(n, maxSeconds)) * time.Second, true
}

// heuristicStatuses are cacheable by default (RFC 9110 15.1), so heuristic
// freshness applies to them.
var heuristicStatuses = map[int]bool{200: true, 203: true, 204: true, 206: true, 300: true, 301: true, 308: true, 404: true, 405: true, 410: true, 414: true, 501: true}

// Forbidden reports whether the response forbids a shared cache to store
// it whatever a policy says: no-store, private, Vary: *, and no-cache (which
// needs revalidation on every use; not stored until validation support).
func Forbidden(h http.Header) bool {
	cc := ParseCacheControl(h)
	return cc.Has("no-store") || cc.Has("private") || cc.Has("no-cache") || h.Get("Vary") == "*"
}

// Explicit reports whether the response states its freshness (s-maxage,
// max-age or Expires), which takes precedence over a policy's TTLs as
// response headers do over nginx's proxy_cache_valid.
func Explicit(h http.Header) bool {
	cc := ParseCacheControl(h)
	return cc.Has("s-maxage") || cc.Has("max-age") || h.Get("Expires") != ""
}

// Storable reports whether a shared cache may store a response with this
// status and header by RFC 9111 alone.
func Storable(status int, h http.Header) bool {
	if Forbidden(h) {
		return false
	}
	cc := ParseCacheControl(h)
	if heuristicStatuses[status] {
		return true
	}
	// Other statuses only with explicit freshness (RFC 9111 3).
	return cc.Has("s-maxage") || cc.Has("max-age") || cc.Has("public") || h.Get("Expires") != ""
}

// Lifetime returns how long a response stays fresh in a shared cache, from
// s-maxage, max-age, Expires minus Date, or 10 % of the time since
// Last-Modified (heuristic freshness, only for statuses that allow it and
// when the response gives no explicit freshness).
func Lifetime(status int, h http.Header, received time.Time) time.Duration {
	cc := ParseCacheControl(h)
	if d, ok := cc.Seconds("s-maxage"); ok {
		return d
	}
	if d, ok := cc.Seconds("max-age"); ok {
		return d
	}
	date := received
	if v := h.Get("Date"); v != "" {
		if t, err := http.ParseTime(v); err == nil {
			date = t
		}
	}
	if v := h.Get("Expires"); v != "" {
		t, err := http.ParseTime(v)
		if err != nil {
			return 0 // an invalid Expires means already expired (RFC 9111 5.3)
		}
		return max(t.Sub(date), 0)
	}
	if !heuristicStatuses[status] {
		return 0
	}
	if v := h.Get("Last-Modified"); v != "" {
		if t, err := http.ParseTime(v); err == nil && t.Before(date) {
			return date.Sub(t) / 10
		}
	}
	return 0
}

// InitialAge is the age a response already had when received (RFC 9111
// 4.2.3, with the response delay taken as zero on loopback-fast origins).
func InitialAge(h http.Header, received time.Time) time.Duration {
	age := time.Duration(0)
	if v := h.Get("Age"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			age = time.Duration(n) * time.Second
		}
	}
	if v := h.Get("Date"); v != "" {
		if t, err := http.ParseTime(v); err == nil {
			age = max(age, received.Sub(t))
		}
	}
	return age
}
