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
	u, _ := DecideWhy(age, lifetime, stored, req, swr, targeted...)
	return u
}

// DecideWhy is Decide, with the rule that decided (a Reason) when the
// stored response is not served fresh.
func DecideWhy(age, lifetime time.Duration, stored http.Header, req Directives, swr time.Duration, targeted ...string) (Use, string) {
	if age < lifetime {
		if req.Has("no-cache") {
			return UseRevalidate, ReasonRequestNoCache
		}
		if req.Has("max-age") {
			// An invalid max-age is taken as 0: revalidate (RFC 9111 4.2.1).
			if maxAge, _ := req.Seconds("max-age"); age > maxAge {
				return UseRevalidate, ReasonRequestMaxAge
			}
		}
		if minFresh, valid := req.Seconds("min-fresh"); valid && lifetime-age < minFresh {
			return UseRevalidate, ReasonRequestMinFresh
		}
		return UseFresh, ""
	}
	// Only a stale response needs its own directives read.
	resp, _ := ResponseControl(stored, targeted...)
	switch {
	case req.Has("no-cache"):
		return UseRevalidate, ReasonRequestNoCache
	case resp.Has("no-cache"):
		return UseRevalidate, ReasonNoCache
	}
	staleness := age - lifetime
	maxStale := false
	if v, present := req["max-stale"]; present {
		limit, valid := req.Seconds("max-stale")
		maxStale = v == "" || valid && staleness <= limit
	}
	if d, ok := resp.Seconds("stale-while-revalidate"); ok {
		swr = d
	}
	updating := staleness < swr && !req.Has("max-age") && !req.Has("min-fresh")
	switch {
	case resp.MustRevalidate() && (maxStale || updating):
		return UseRevalidate, ReasonMustRevalidate // it would have been served stale
	case resp.MustRevalidate():
		return UseRevalidate, ReasonExpired
	case maxStale:
		return UseStale, ReasonMaxStale
	case updating:
		return UseUpdating, ReasonSWR
	}
	return UseRevalidate, ReasonExpired
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
