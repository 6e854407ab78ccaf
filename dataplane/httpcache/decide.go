package httpcache

import (
	"net/http"
	"time"
)

// Use is what to do with a stored response.
type Use int

const (
	UseFresh      Use = iota // serve it
	UseStale                 // serve it stale: the client allows it
	UseUpdating              // serve it stale and revalidate in the background
	UseRevalidate            // ask the origin first
)

func (u Use) String() string {
	return [...]string{"fresh", "stale", "updating", "revalidate"}[u]
}

// Decide applies RFC 9111 4.2 and 5.2 to a stored response of age and
// freshness lifetime, with header stored, and a request's directives. swr
// is the stale-while-revalidate window the policy allows where the
// response states none.
func Decide(age, lifetime time.Duration, stored http.Header, req Directives, swr time.Duration, targeted ...string) Use {
	if age < lifetime {
		ok := !req.Has("no-cache")
		if req.Has("max-age") {
			// An invalid max-age is taken as 0: revalidate (RFC 9111 4.2.1).
			maxAge, _ := req.Seconds("max-age")
			ok = ok && age <= maxAge
		}
		if minFresh, valid := req.Seconds("min-fresh"); valid && lifetime-age < minFresh {
			ok = false
		}
		if ok {
			return UseFresh
		}
		return UseRevalidate
	}
	// Only a stale response needs its own directives read.
	resp, _ := ResponseControl(stored, targeted...)
	if resp.MustRevalidate() || req.Has("no-cache") {
		return UseRevalidate
	}
	staleness := age - lifetime
	if v, present := req["max-stale"]; present {
		if limit, valid := req.Seconds("max-stale"); v == "" || valid && staleness <= limit {
			return UseStale
		}
	}
	if d, ok := resp.Seconds("stale-while-revalidate"); ok {
		swr = d
	}
	if staleness < swr && !req.Has("max-age") && !req.Has("min-fresh") {
		return UseUpdating
	}
	return UseRevalidate
}

// StaleOnError reports whether a stored response of age and lifetime, with
// header stored, may be served to a request with header req when the
// origin fails: within stale-if-error in the response or the request, or
// the policy's window, and never when it must be revalidated.
func StaleOnError(age, lifetime time.Duration, stored, req http.Header, window time.Duration, targeted ...string) bool {
	resp, _ := ResponseControl(stored, targeted...)
	if resp.MustRevalidate() {
		return false
	}
	if d, ok := resp.Seconds("stale-if-error"); ok {
		window = max(window, d)
	}
	if d, ok := ForRequest(req).Seconds("stale-if-error"); ok {
		window = max(window, d)
	}
	return age-lifetime <= window
}

// StaleDisconnected reports whether a stored response with header stored
// may be served, however stale, when the cache is disconnected from the
// origin (RFC 9111 4.2.4), as when the origin closes the connection
// without answering (Disconnected): unless a directive forbids serving it
// stale (must-revalidate, proxy-revalidate, s-maxage, no-cache; 5.2.2).
func StaleDisconnected(stored http.Header, targeted ...string) bool {
	resp, _ := ResponseControl(stored, targeted...)
	return !resp.MustRevalidate()
}
