package e2e

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

// The RFC 9111 conformance suite: each case is a scripted origin and a few
// requests through a dev cluster, run twice, once sent to the key's owner
// and once to a node that relays it. Every case names the section it
// checks.

// rfcStep is one request of a case and what must come of it.
type rfcStep struct {
	sub    string   // appended to the case's path
	method string   // default GET
	header []string // request header pairs
	code   int      // want status; 0 means 200
	cache  string   // want X-Cache; "" means any
	origin int      // want requests the origin saw for the case so far; 0 means do not check
	body   string   // want body; "" means do not check
	// check, when set, looks further: resp, its body, and the headers of
	// every request the origin saw for the case.
	check func(resp *http.Response, body string, seen []http.Header) error
	// eventually polls the origin count (a background revalidation).
	eventually bool
}

type rfcCase struct {
	section, name string
	// origin answers the case's n-th origin request (from 1).
	origin func(w http.ResponseWriter, r *http.Request, n int)
	steps  []rfcStep
}

// rfcOrigin dispatches /<variant>/<case>/... to the case's handler and
// counts requests per case and variant.
type rfcOrigin struct {
	cases []rfcCase
	mu    sync.Mutex
	seen  map[string][]http.Header // "<variant>/<case>" -> request headers
}

func (o *rfcOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, policyPrefix+"/"), "/"), "/", 3)
	if len(parts) < 2 {
		http.NotFound(w, r)
		return
	}
	i, err := strconv.Atoi(parts[1])
	if err != nil || i >= len(o.cases) {
		http.NotFound(w, r)
		return
	}
	id := parts[0] + "/" + parts[1]
	h := r.Header.Clone()
	h.Set(":method", r.Method)
	h.Set(":path", r.URL.Path)
	o.mu.Lock()
	o.seen[id] = append(o.seen[id], h)
	n := len(o.seen[id])
	o.mu.Unlock()
	o.cases[i].origin(w, r, n)
}

func (o *rfcOrigin) requests(id string) []http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]http.Header(nil), o.seen[id]...)
}

// handlers for common origins.
func fixed(status int, body string, kv ...string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		for i := 0; i < len(kv); i += 2 {
			w.Header().Add(kv[i], kv[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// versioned answers "v<n>" with the given header on every request.
func versioned(kv ...string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		for i := 0; i < len(kv); i += 2 {
			w.Header().Add(kv[i], kv[i+1])
		}
		io.WriteString(w, "v"+strconv.Itoa(n))
	}
}

// conditional answers 304 to a request with a matching validator, else
// 200 "v<n>" with an ETag and Last-Modified and the given header.
func conditional(kv ...string) func(http.ResponseWriter, *http.Request, int) {
	lm := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	return func(w http.ResponseWriter, r *http.Request, n int) {
		for i := 0; i < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		w.Header().Set("ETag", `"e1"`)
		w.Header().Set("Last-Modified", lm)
		if r.Header.Get("If-None-Match") == `"e1"` || r.Header.Get("If-Modified-Since") == lm {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "v"+strconv.Itoa(n))
	}
}

// failAfterFirst answers as first on request 1 and with status (and
// no freshness) afterwards.
func failAfterFirst(status int, first ...string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			fixed(200, "v1", first...)(w, r, n)
			return
		}
		w.WriteHeader(status)
		io.WriteString(w, "origin failed")
	}
}

// dropAfterFirst answers the first request 200 "v1" with the given
// header, and closes the connection of every later one without answering.
func dropAfterFirst(first ...string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			fixed(200, "v1", first...)(w, r, n)
			return
		}
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
	}
}

// pointsAtTarget answers method on <case>/<sub> with status and field
// naming <case>/target, and every other request with a fresh "v<n>".
func pointsAtTarget(method, field, sub string, status int) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Cache-Control", "max-age=60")
		if r.Method == method {
			w.Header().Set(field, strings.TrimSuffix(r.URL.Path, sub)+"/target")
			w.WriteHeader(status)
			return
		}
		io.WriteString(w, "v"+strconv.Itoa(n))
	}
}

// farDate is a future HTTP-date at 09:00, for malformed variants of it.
var farDate = time.Date(2099, 1, 1, 9, 0, 0, 0, time.UTC)

func httpDate(d time.Duration) string { return time.Now().Add(d).UTC().Format(http.TimeFormat) }

func sawHeader(i int, name, want string) func(*http.Response, string, []http.Header) error {
	return func(_ *http.Response, _ string, seen []http.Header) error {
		if len(seen) <= i {
			return fmt.Errorf("origin saw %d requests; want a request %d", len(seen), i+1)
		}
		if got := seen[i].Get(name); got != want {
			return fmt.Errorf("origin request %d had %s %q, want %q", i+1, name, got, want)
		}
		return nil
	}
}

func hasHeader(name, want string) func(*http.Response, string, []http.Header) error {
	return func(resp *http.Response, _ string, _ []http.Header) error {
		if got := resp.Header.Get(name); got != want {
			return fmt.Errorf("response %s %q, want %q", name, got, want)
		}
		return nil
	}
}

func rfcCases() []rfcCase {
	ma60 := []string{"Cache-Control", "max-age=60"}
	staleAge := func(cc string) []string { return []string{"Cache-Control", cc, "Age", "120"} }
	return []rfcCase{
		// 3: storing responses.
		{"3", "max-age response is stored", versioned(ma60...), []rfcStep{{cache: "MISS", origin: 1}, {cache: "HIT", origin: 1, body: "v1"}}},
		{"3", "s-maxage response is stored", versioned("Cache-Control", "s-maxage=60"), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"3", "Expires in the future is stored", versioned("Expires", httpDate(time.Hour)), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"3", "no freshness and no validator is not stored", versioned(), []rfcStep{{}, {cache: "MISS", origin: 2, body: "v2"}}},
		{"3", "500 without explicit freshness is not stored", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Last-Modified", httpDate(-24*time.Hour))
			w.WriteHeader(500)
		}, []rfcStep{{code: 500}, {code: 500, origin: 2}}},
		{"3", "302 without explicit freshness is not stored", fixed(302, "", "Location", "/elsewhere", "Last-Modified", httpDate(-24*time.Hour)),
			[]rfcStep{{code: 302}, {code: 302, origin: 2}}},
		{"3", "404 with max-age is stored", fixed(404, "gone", ma60...), []rfcStep{{code: 404}, {code: 404, cache: "HIT", origin: 1}}},
		{"3", "directive names are case-insensitive", versioned("Cache-Control", "MAX-AGE=60"), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"3", "unknown response directives are ignored", versioned("Cache-Control", "max-age=60, x-unknown=1, foo"), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"3", "Set-Cookie response is not stored by a shared cache by default", versioned("Cache-Control", "max-age=60", "Set-Cookie", "s=1"),
			[]rfcStep{{}, {cache: "MISS", origin: 2}}},
		{"3.5", "a response to a request with Authorization is not stored without public, s-maxage or must-revalidate", versioned(ma60...),
			[]rfcStep{{header: []string{"Authorization", "Bearer x"}, cache: "MISS"}, {header: []string{"Authorization", "Bearer x"}, cache: "MISS", origin: 2}}},
		{"3.5", "a public response to a request with Authorization is stored and reused", versioned("Cache-Control", "public, max-age=60"),
			[]rfcStep{{header: []string{"Authorization", "Bearer x"}, cache: "MISS"}, {header: []string{"Authorization", "Bearer y"}, cache: "HIT", origin: 1}}},
		{"3.5", "an s-maxage response to a request with Authorization is stored", versioned("Cache-Control", "s-maxage=60"),
			[]rfcStep{{header: []string{"Authorization", "Bearer x"}, cache: "MISS"}, {header: []string{"Authorization", "Bearer x"}, cache: "HIT", origin: 1}}},
		{"3.5", "a must-revalidate response to a request with Authorization is stored", versioned("Cache-Control", "must-revalidate, max-age=60"),
			[]rfcStep{{header: []string{"Authorization", "Bearer x"}, cache: "MISS"}, {header: []string{"Authorization", "Bearer x"}, cache: "HIT", origin: 1}}},
		{"5.2.1.5", "request no-store goes to the origin", versioned(ma60...),
			[]rfcStep{{header: []string{"Cache-Control", "no-store"}, cache: "BYPASS"}, {cache: "MISS", origin: 2}}},
		{"5.2.2.5", "no-store response is not stored", versioned("Cache-Control", "no-store, max-age=60"), []rfcStep{{}, {cache: "MISS", origin: 2}}},
		{"5.2.2.3", "must-understand with an understood status overrides no-store", versioned("Cache-Control", "must-understand, no-store, max-age=60"),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"5.2.2.3", "must-understand with a status the cache does not recognise is not stored", fixed(599, "v", "Cache-Control", "max-age=3600, no-store, must-understand"),
			[]rfcStep{{code: 599, cache: "MISS", check: notStored}, {code: 599, cache: "MISS", origin: 2}}},
		{"4.3.2", "without Last-Modified, If-Modified-Since is answered by the stored Date", versioned("Cache-Control", "max-age=600", "Date", httpDate(-10*time.Second)),
			[]rfcStep{{}, {header: []string{"If-Modified-Since", httpDate(0)}, code: 304, origin: 1},
				{header: []string{"If-Modified-Since", httpDate(-2 * time.Hour)}, code: 200, cache: "HIT", origin: 1}}},
		{"5.2.2.7", "private response is not stored", versioned("Cache-Control", "private, max-age=60"), []rfcStep{{}, {cache: "MISS", origin: 2}}},
		{"4.1", "Vary: * is never stored", versioned("Cache-Control", "max-age=60", "Vary", "*"), []rfcStep{{}, {cache: "MISS", origin: 2}}},
		{"4.1", "Accept-Language values that ask the same select one variant", versioned("Cache-Control", "max-age=60", "Vary", "Accept-Language"),
			[]rfcStep{{header: []string{"Accept-Language", "en-US, fr;q=0.5"}}, {header: []string{"Accept-Language", "fr ; q=0.50,EN-us"}, cache: "HIT", origin: 1},
				{header: []string{"Accept-Language", "fr, en-US;q=0.5"}, cache: "MISS", origin: 2}}},
		{"4.1", "a variant whose Content-Language is exactly the language a client prefers answers it", negotiated(),
			[]rfcStep{{header: []string{"Accept-Language", "de-CH, de;q=0.9"}, body: "de-ch"},
				{header: []string{"Accept-Language", "de-CH"}, cache: "HIT", origin: 1, body: "de-ch"},
				{header: []string{"Accept-Language", "de"}, cache: "MISS", origin: 2, body: "de"}, // de-CH is not de
				{header: []string{"Accept-Language", "fr;q=0.3, de;q=0.8"}, cache: "HIT", origin: 2, body: "de"},
				{header: []string{"Accept-Language", "de, de-CH"}, cache: "MISS", origin: 3}}}, // no single preference

		// 4.2: freshness.
		{"4.2.1", "s-maxage overrides max-age=0", versioned("Cache-Control", "max-age=0, s-maxage=60"), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"4.2.1", "max-age overrides an Expires in the past", versioned("Cache-Control", "max-age=60", "Expires", httpDate(-time.Hour)), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"4.2.1", "the first of two max-age directives is used", versioned("Cache-Control", "max-age=60", "Cache-Control", "max-age=0"), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"4.2.1", "an invalid max-age makes the response stale despite Expires", versioned("Cache-Control", "max-age=6x", "Expires", httpDate(time.Hour)),
			[]rfcStep{{}, {origin: 2, body: "v2"}}},
		{"4.2.1", "a negative max-age makes the response stale", versioned("Cache-Control", "max-age=-60", "ETag", `"x"`), []rfcStep{{}, {origin: 2}}},
		{"5.3", "an invalid Expires is in the past", versioned("Expires", "0", "ETag", `"x"`), []rfcStep{{}, {origin: 2}}},
		{"5.3", "an Expires with a run of spaces is invalid, so stale", versioned("Expires", strings.Replace(httpDate(time.Hour), " ", "  ", 1)),
			[]rfcStep{{}, {origin: 2}}},
		{"5.3", "an Expires with a one-digit hour is invalid, so stale", versioned("Expires", strings.Replace(farDate.Format(http.TimeFormat), " 09:", " 9:", 1)),
			[]rfcStep{{}, {origin: 2}}},
		{"5.3", "an Expires split over two field lines is invalid, so stale", versioned("Expires", farDate.Format("Mon, 02 Jan 2006"), "Expires", "09:00:00 GMT"),
			[]rfcStep{{}, {origin: 2}}},
		{"5.3", "two Expires field lines are invalid, so stale", versioned("Expires", httpDate(time.Hour), "Expires", httpDate(2*time.Hour)),
			[]rfcStep{{}, {origin: 2}}},
		{"5.3", "an rfc850 Expires is a valid date", versioned("Expires", time.Now().Add(time.Hour).UTC().Format("Monday, 02-Jan-06 15:04:05 GMT")),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"5.3", "an asctime Expires is a valid date", versioned("Expires", time.Now().Add(time.Hour).UTC().Format("Mon Jan _2 15:04:05 2006")),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"4.2", "a cache matches an Expires case-insensitively", versioned("Expires", strings.ToLower(httpDate(time.Hour))),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"5.1", "an Age with a suffix is ignored, not read up to it", versioned("Cache-Control", "max-age=60", "Age", "100s"),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"5.1", "an Age with a parameter is ignored", versioned("Cache-Control", "max-age=60", "Age", "100;x=1"),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"5.1", "an Age holding a list uses its first member", versioned("Cache-Control", "max-age=3600", "Age", "7200, 0"),
			[]rfcStep{{}, {origin: 2, body: "v2"}}},
		{"5.1", "an Age list's later members are discarded", versioned("Cache-Control", "max-age=3600", "Age", "0, 7200"),
			[]rfcStep{{}, {cache: "HIT", origin: 1, body: "v1"}}},

		// RFC 9213: targeted cache control. CDN-Cache-Control governs this
		// cache and leaves Cache-Control to the caches downstream.
		{"RFC 9213 2.2", "CDN-Cache-Control max-age stores what Cache-Control forbids", versioned("Cache-Control", "no-store", "CDN-Cache-Control", "max-age=60"),
			[]rfcStep{{}, {cache: "HIT", origin: 1, check: hasHeader("Cache-Control", "no-store")}}},
		{"RFC 9213 2.2", "CDN-Cache-Control no-store is not stored", versioned("Cache-Control", "max-age=60", "CDN-Cache-Control", "no-store"),
			[]rfcStep{{}, {cache: "MISS", origin: 2}}},
		{"RFC 9213 2.2", "CDN-Cache-Control private is not stored", versioned("Cache-Control", "public, max-age=60", "CDN-Cache-Control", "private"),
			[]rfcStep{{}, {cache: "MISS", origin: 2}}},
		{"RFC 9213 2.2", "CDN-Cache-Control no-cache revalidates", conditional("Cache-Control", "max-age=60", "CDN-Cache-Control", "no-cache"),
			[]rfcStep{{}, {cache: "REVALIDATED", origin: 2}}},
		{"RFC 9213 2.2", "CDN-Cache-Control s-maxage sets the freshness", versioned("Cache-Control", "max-age=0", "CDN-Cache-Control", "s-maxage=60"),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"RFC 9213 2.2", "Expires is ignored under CDN-Cache-Control", versioned("Expires", httpDate(time.Hour), "CDN-Cache-Control", "max-age=0"),
			[]rfcStep{{}, {origin: 2}}},
		{"RFC 9213 2.2", "CDN-Cache-Control must-revalidate forbids stale on error", failAfterFirst(503, "Cache-Control", "max-age=60, stale-if-error=600", "CDN-Cache-Control", "max-age=0, must-revalidate"),
			[]rfcStep{{}, {code: 503, origin: 2}}},
		{"RFC 9213 2.1", "an invalid CDN-Cache-Control is ignored as a whole", versioned("Cache-Control", "max-age=60", "CDN-Cache-Control", `max-age="0", no-store`),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"RFC 9213 2.1", "a CDN-Cache-Control that is no Dictionary is ignored", versioned("Cache-Control", "max-age=60", "CDN-Cache-Control", "no-store;;"),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"RFC 9213 2.1", "unknown CDN-Cache-Control directives are ignored", versioned("Cache-Control", "no-store", "CDN-Cache-Control", "max-age=60, x-vendor=?1"),
			[]rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"5.3", "Expires equal to Date is stale", func(w http.ResponseWriter, r *http.Request, n int) {
			d := httpDate(0)
			w.Header().Set("Date", d)
			w.Header().Set("Expires", d)
			w.Header().Set("ETag", `"x"`)
			io.WriteString(w, "v"+strconv.Itoa(n))
		}, []rfcStep{{}, {origin: 2, body: "v2"}}},
		{"1.2.2", "a max-age beyond 2^31 is capped, not wrapped", versioned("Cache-Control", "max-age=99999999999999999999"), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"4.2.2", "heuristic freshness from Last-Modified", versioned("Last-Modified", httpDate(-100*24*time.Hour)), []rfcStep{{}, {cache: "HIT", origin: 1}}},
		{"4.2.2", "no heuristic freshness for a status not cacheable by default", fixed(307, "", "Location", "/x", "Last-Modified", httpDate(-100*24*time.Hour)),
			[]rfcStep{{code: 307}, {code: 307, origin: 2}}},
		{"4.2.3", "Age from the origin counts against max-age", versioned(staleAge("max-age=60")...), []rfcStep{{}, {origin: 2, body: "v2"}}},
		{"4.2.3", "an old Date counts against max-age", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Date", httpDate(-200*time.Second))
			io.WriteString(w, "v"+strconv.Itoa(n))
		}, []rfcStep{{}, {origin: 2, body: "v2"}}},
		{"5.1", "Age on a hit is at least the origin's", versioned("Cache-Control", "max-age=600", "Age", "30"), []rfcStep{{}, {cache: "HIT",
			check: func(resp *http.Response, _ string, _ []http.Header) error {
				if a, _ := strconv.Atoi(resp.Header.Get("Age")); a < 30 {
					return fmt.Errorf("Age %q, want at least 30", resp.Header.Get("Age"))
				}
				return nil
			}}}},

		// 5.2.1: request directives.
		{"5.2.1.1", "request max-age=0 revalidates", conditional(ma60...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "max-age=0"}, cache: "REVALIDATED", origin: 2, body: "v1"}}},
		{"5.2.1.1", "request max-age above the age is a hit", versioned(ma60...), []rfcStep{{}, {header: []string{"Cache-Control", "max-age=3600"}, cache: "HIT", origin: 1}}},
		{"5.2.1.1", "an invalid request max-age revalidates", versioned(ma60...), []rfcStep{{}, {header: []string{"Cache-Control", "max-age=abc"}, origin: 2}}},
		{"5.2.1.3", "min-fresh beyond the remaining freshness revalidates", versioned(ma60...), []rfcStep{{}, {header: []string{"Cache-Control", "min-fresh=100"}, origin: 2}}},
		{"5.2.1.3", "min-fresh within the remaining freshness is a hit", versioned("Cache-Control", "max-age=3600"),
			[]rfcStep{{}, {header: []string{"Cache-Control", "min-fresh=10"}, cache: "HIT", origin: 1}}},
		{"5.2.1.2", "max-stale accepts a stale response", versioned(staleAge("max-age=60")...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "max-stale"}, cache: "STALE", origin: 1, body: "v1"}}},
		{"5.2.1.2", "max-stale with a bound accepts staleness within it", versioned(staleAge("max-age=60")...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "max-stale=600"}, cache: "STALE", origin: 1}}},
		{"5.2.1.2", "max-stale with a smaller bound revalidates", versioned(staleAge("max-age=60")...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "max-stale=10"}, origin: 2, body: "v2"}}},
		{"5.2.2.2", "max-stale does not override must-revalidate", versioned(staleAge("max-age=60, must-revalidate")...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "max-stale"}, origin: 2, body: "v2"}}},
		{"5.2.1.4", "request no-cache revalidates a fresh response", conditional(ma60...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "no-cache"}, cache: "REVALIDATED", origin: 2}}},
		{"5.4", "Pragma: no-cache without Cache-Control revalidates", versioned(ma60...), []rfcStep{{}, {header: []string{"Pragma", "no-cache"}, origin: 2}}},
		{"5.4", "Pragma is ignored when Cache-Control is present", versioned(ma60...),
			[]rfcStep{{}, {header: []string{"Pragma", "no-cache", "Cache-Control", "max-age=3600"}, cache: "HIT", origin: 1}}},
		{"5.2.1.7", "only-if-cached without a stored response is 504", versioned(ma60...),
			[]rfcStep{{header: []string{"Cache-Control", "only-if-cached"}, code: 504}, {cache: "MISS", origin: 1}}},
		{"5.2.1.7", "only-if-cached with a stored response is a hit", versioned(ma60...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "only-if-cached"}, cache: "HIT", origin: 1}}},
		{"5.2.1", "unknown request directives are ignored", versioned(ma60...), []rfcStep{{}, {header: []string{"Cache-Control", "x-foo=bar"}, cache: "HIT", origin: 1}}},

		// 5.2.2: response directives.
		{"5.2.2.4", "no-cache response is stored and revalidated on every use", conditional("Cache-Control", "no-cache"),
			[]rfcStep{{}, {cache: "REVALIDATED", origin: 2, body: "v1", check: sawHeader(1, "If-None-Match", `"e1"`)}, {cache: "REVALIDATED", origin: 3}}},
		{"5.2.2.2", "must-revalidate: a stale response is not served when the origin fails", failAfterFirst(503, staleAge("max-age=60, must-revalidate, stale-if-error=600")...),
			[]rfcStep{{}, {code: 503, origin: 2}}},
		{"5.2.2.8", "proxy-revalidate binds a shared cache like must-revalidate", failAfterFirst(503, staleAge("max-age=60, proxy-revalidate, stale-if-error=600")...),
			[]rfcStep{{}, {code: 503, origin: 2}}},
		{"5.2.2.10", "s-maxage implies proxy-revalidate", failAfterFirst(503, staleAge("s-maxage=60, stale-if-error=600")...),
			[]rfcStep{{}, {code: 503, origin: 2}}},
		{"RFC 8246", "immutable response is a hit while fresh", versioned("Cache-Control", "max-age=600, immutable"), []rfcStep{{}, {cache: "HIT", origin: 1}}},

		// 4.3: validation.
		{"4.3.1", "a stale response with an ETag is revalidated with If-None-Match", conditional(staleAge("max-age=60")...),
			[]rfcStep{{}, {cache: "REVALIDATED", origin: 2, check: sawHeader(1, "If-None-Match", `"e1"`)}}},
		{"4.3.1", "a stale response with Last-Modified is revalidated with If-Modified-Since", func(w http.ResponseWriter, r *http.Request, n int) {
			lm := "Mon, 02 Jan 2006 15:04:05 GMT"
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Age", "120")
			w.Header().Set("Last-Modified", lm)
			if r.Header.Get("If-Modified-Since") == lm {
				w.WriteHeader(304)
				return
			}
			io.WriteString(w, "v"+strconv.Itoa(n))
		}, []rfcStep{{}, {cache: "REVALIDATED", origin: 2, body: "v1", check: sawHeader(1, "If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT")}}},
		{"4.3.4", "a 304 updates the stored header and freshness", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("ETag", `"e1"`)
			w.Header().Set("X-Version", strconv.Itoa(n))
			if n == 1 {
				w.Header().Set("Cache-Control", "max-age=60")
				w.Header().Set("Age", "120")
				io.WriteString(w, "body")
				return
			}
			w.Header().Set("Cache-Control", "max-age=600")
			w.WriteHeader(304)
		}, []rfcStep{{}, {cache: "REVALIDATED", origin: 2, body: "body", check: hasHeader("X-Version", "2")},
			{cache: "HIT", origin: 2, body: "body", check: hasHeader("X-Version", "2")}}},
		{"4.3.3", "a 200 to a revalidation replaces the stored response", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("ETag", `"e`+strconv.Itoa(n)+`"`)
			w.Header().Set("Cache-Control", "max-age=60")
			if n == 1 {
				w.Header().Set("Age", "120")
			}
			io.WriteString(w, "v"+strconv.Itoa(n))
		}, []rfcStep{{}, {cache: "EXPIRED", origin: 2, body: "v2"}, {cache: "HIT", origin: 2, body: "v2"}}},
		{"4.3.2", "client If-None-Match matching the stored ETag gets 304", conditional(ma60...),
			[]rfcStep{{}, {header: []string{"If-None-Match", `"e1"`}, code: 304, origin: 1, check: hasHeader("ETag", `"e1"`)}}},
		{"4.3.2", "weak comparison for If-None-Match", conditional(ma60...), []rfcStep{{}, {header: []string{"If-None-Match", `W/"e1"`}, code: 304, origin: 1}}},
		{"4.3.2", "If-None-Match: * gets 304", conditional(ma60...), []rfcStep{{}, {header: []string{"If-None-Match", "*"}, code: 304, origin: 1}}},
		{"4.3.2", "client If-None-Match not matching gets the stored 200", conditional(ma60...),
			[]rfcStep{{}, {header: []string{"If-None-Match", `"other"`}, cache: "HIT", origin: 1, body: "v1"}}},
		{"4.3.2", "client If-Modified-Since not before Last-Modified gets 304", conditional(ma60...),
			[]rfcStep{{}, {header: []string{"If-Modified-Since", httpDate(0)}, code: 304, origin: 1}}},
		{"4.3.2", "client If-Modified-Since before Last-Modified gets 200", conditional(ma60...),
			[]rfcStep{{}, {header: []string{"If-Modified-Since", httpDate(-48 * time.Hour)}, cache: "HIT", origin: 1}}},
		{"4.3.2", "If-None-Match takes precedence over If-Modified-Since", conditional(ma60...),
			[]rfcStep{{}, {header: []string{"If-None-Match", `"other"`, "If-Modified-Since", httpDate(0)}, cache: "HIT", origin: 1}}},
		{"4.3.2", "client conditionals are not forwarded on a fill", conditional(ma60...),
			[]rfcStep{{header: []string{"If-None-Match", `"e1"`}, code: 304, origin: 1, check: sawHeader(0, "If-None-Match", "")}}},

		// 4.1: Vary.
		{"4.1", "each Vary variant is stored and selected", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "Accept-Language")
			io.WriteString(w, "lang="+r.Header.Get("Accept-Language"))
		}, []rfcStep{
			{header: []string{"Accept-Language", "en"}, body: "lang=en", origin: 1},
			{header: []string{"Accept-Language", "fr"}, body: "lang=fr", origin: 2},
			{header: []string{"Accept-Language", "en"}, body: "lang=en", cache: "HIT", origin: 2},
			{header: []string{"Accept-Language", "fr"}, body: "lang=fr", cache: "HIT", origin: 2},
		}},
		{"4.1", "a request without the varying field is its own variant", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "X-Flavour")
			io.WriteString(w, "flavour="+r.Header.Get("X-Flavour"))
		}, []rfcStep{
			{header: []string{"X-Flavour", "mint"}, body: "flavour=mint"},
			{body: "flavour=", origin: 2},
			{body: "flavour=", cache: "HIT", origin: 2},
		}},
		{"4.1", "Vary on two fields", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "X-A, X-B")
			io.WriteString(w, r.Header.Get("X-A")+r.Header.Get("X-B"))
		}, []rfcStep{
			{header: []string{"X-A", "1", "X-B", "2"}, body: "12"},
			{header: []string{"X-A", "1", "X-B", "3"}, body: "13", origin: 2},
			{header: []string{"X-A", "1", "X-B", "2"}, body: "12", cache: "HIT", origin: 2},
		}},
		{"4.1", "Vary values are compared after normalising whitespace", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "Accept-Language")
			io.WriteString(w, "v"+strconv.Itoa(n))
		}, []rfcStep{
			{header: []string{"Accept-Language", "en, fr"}},
			{header: []string{"Accept-Language", "en,fr"}, cache: "HIT", origin: 1},
		}},

		// RFC 5861 and 4.2.4: serving stale.
		{"RFC 5861 3", "stale-while-revalidate serves stale and revalidates once in the background", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60, stale-while-revalidate=600")
			if n == 1 {
				w.Header().Set("Age", "120") // stale from the start; the refreshed one is fresh
			}
			io.WriteString(w, "v"+strconv.Itoa(n))
		},
			[]rfcStep{{}, {cache: "UPDATING", body: "v1"}, {origin: 2, eventually: true}}},
		{"RFC 5861 4", "stale-if-error serves stale when the origin answers 500", failAfterFirst(500, staleAge("max-age=60, stale-if-error=600")...),
			[]rfcStep{{}, {cache: "STALE", body: "v1", origin: 2}}},
		{"RFC 5861 4", "stale-if-error serves stale when the origin answers 503", failAfterFirst(503, staleAge("max-age=60, stale-if-error=600")...),
			[]rfcStep{{}, {cache: "STALE", body: "v1", origin: 2}}},
		{"RFC 5861 4", "stale-if-error beyond its window passes the error on", failAfterFirst(500, staleAge("max-age=60, stale-if-error=10")...),
			[]rfcStep{{}, {code: 500, origin: 2}}},
		{"RFC 5861 4", "stale-if-error in the request", failAfterFirst(500, staleAge("max-age=60")...),
			[]rfcStep{{}, {header: []string{"Cache-Control", "stale-if-error=600"}, cache: "STALE", body: "v1", origin: 2}}},
		// The origin closing the connection without an answer is an error
		// like a 5xx. (The origin sees the request twice: net/http retries
		// an idempotent request once when a reused connection closes before
		// any answer, as an idle connection the origin has closed would.)
		{"RFC 5861 4", "stale-if-error serves stale when the origin closes the connection without answering", dropAfterFirst(staleAge("max-age=60, stale-if-error=600")...),
			[]rfcStep{{}, {cache: "STALE", body: "v1", origin: 3}}},
		{"5.2.2.2", "must-revalidate: no stale when the origin closes the connection", dropAfterFirst(staleAge("max-age=60, must-revalidate, stale-if-error=600")...),
			[]rfcStep{{}, {code: 504, origin: 3}}},
		{"5.2.2.8", "proxy-revalidate: no stale when the origin closes the connection", dropAfterFirst(staleAge("max-age=60, proxy-revalidate, stale-if-error=600")...),
			[]rfcStep{{}, {code: 504, origin: 3}}},
		{"5.2.2.10", "s-maxage: no stale when the origin closes the connection", dropAfterFirst(staleAge("s-maxage=60, stale-if-error=600")...),
			[]rfcStep{{}, {code: 504, origin: 3}}},
		{"5.2.2.4", "no-cache: no stale when the origin closes the connection", dropAfterFirst("Cache-Control", "no-cache, stale-if-error=600", "ETag", `"e1"`),
			[]rfcStep{{}, {code: 504, origin: 3}}},
		{"4.2.4", "without a stale directive a stale response is not served on error", failAfterFirst(500, staleAge("max-age=60")...),
			[]rfcStep{{}, {code: 500, origin: 2}}},
		// An origin that closes the connection without answering leaves
		// the cache disconnected: a stale response may be served without a
		// stale directive, as a stale answer on error is.
		{"4.2.4", "disconnected: a stale response is served when the origin closes the connection without answering", dropAfterFirst(staleAge("max-age=60")...),
			[]rfcStep{{}, {cache: "STALE", body: "v1", origin: 3, check: staleHit}}},
		{"4.2.4", "disconnected: must-revalidate still forbids the stale response", dropAfterFirst(staleAge("max-age=60, must-revalidate")...),
			[]rfcStep{{}, {code: 504, origin: 3}}},
		{"4.2.4", "disconnected: no-cache still forbids the stale response", dropAfterFirst("Cache-Control", "no-cache", "ETag", `"e1"`),
			[]rfcStep{{}, {code: 504, origin: 3}}},

		// 4.4: invalidation.
		{"4.4", "a successful POST invalidates the target", versioned(ma60...), []rfcStep{
			{}, {cache: "HIT", origin: 1}, {method: "POST", cache: "BYPASS", origin: 2}, {cache: "MISS", origin: 3, body: "v3"}}},
		{"4.4", "a successful PUT invalidates the Location target", pointsAtTarget("PUT", "Location", "/put", 201), []rfcStep{{sub: "/target"}, {sub: "/target", cache: "HIT", origin: 1}, {sub: "/put", method: "PUT", code: 201, origin: 2},
			{sub: "/target", cache: "MISS", origin: 3}}},
		{"4.4", "a successful DELETE invalidates the Content-Location target", pointsAtTarget("DELETE", "Content-Location", "/del", 204), []rfcStep{{sub: "/target"}, {sub: "/del", method: "DELETE", code: 204, origin: 2}, {sub: "/target", cache: "MISS", origin: 3}}},
		{"4.4", "a failed POST does not invalidate", func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Method == "POST" {
				w.WriteHeader(500)
				return
			}
			w.Header().Set("Cache-Control", "max-age=60")
			io.WriteString(w, "v"+strconv.Itoa(n))
		}, []rfcStep{{}, {method: "POST", code: 500, origin: 2}, {cache: "HIT", origin: 2, body: "v1"}}},
		{"4.4", "a PATCH invalidates the target", versioned(ma60...), []rfcStep{{}, {method: "PATCH", origin: 2}, {cache: "MISS", origin: 3}}},

		// Methods, HEAD and transparency (RFC 9110 as a cache applies it).
		{"9110 9.3.2", "HEAD after GET is a hit without a body", versioned(ma60...), []rfcStep{{}, {method: "HEAD", cache: "HIT", origin: 1,
			check: func(resp *http.Response, body string, _ []http.Header) error {
				if body != "" || resp.ContentLength != 2 {
					return fmt.Errorf("HEAD body %q, Content-Length %d; want none and 2", body, resp.ContentLength)
				}
				return nil
			}}}},
		{"9110 9.3.2", "a HEAD miss fills with GET", versioned(ma60...), []rfcStep{{method: "HEAD", check: sawHeader(0, ":method", "GET")}, {cache: "HIT", origin: 1, body: "v1"}}},
		{"9110 14.2", "a range of an object not stored is answered 206 as the whole fill streams in", ranged(sameETag, ma60...), []rfcStep{
			rangeStep("bytes=10-19", 206, "MISS", 1, sawHeader(0, "Range", ""), hasHeader("Content-Range", "bytes 10-19/100")),
			{cache: "HIT", origin: 1, body: partialBody},
			rangeStep("bytes=90-", 206, "HIT", 1)}},
		{"9110 15.5.17", "an unsatisfiable range of an object not stored is a 416", ranged(sameETag, ma60...), []rfcStep{
			rangeStep("bytes=500-600", 416, "MISS", 1, hasHeader("Content-Range", "bytes */100")),
			{cache: "HIT", origin: 1, body: partialBody}}},
		{"9110 9.3.1", "OPTIONS goes to the origin", versioned(ma60...), []rfcStep{{method: "OPTIONS", cache: "BYPASS"}, {method: "OPTIONS", origin: 2}}},
		{"9110 7.6.1", "hop-by-hop fields named by Connection are not forwarded", versioned("Cache-Control", "max-age=60", "Connection", "X-Hop", "X-Hop", "secret"),
			[]rfcStep{{check: hasHeader("X-Hop", "")}, {cache: "HIT", check: hasHeader("X-Hop", "")}}},
		{"9110 7.6.1", "request hop-by-hop fields do not reach the origin", versioned(ma60...),
			[]rfcStep{{header: []string{"Connection", "X-Secret", "X-Secret", "1"}, check: sawHeader(0, "X-Secret", "")}}},
		{"9110 7.6.3", "the origin sees Via", versioned(ma60...), []rfcStep{{check: func(_ *http.Response, _ string, seen []http.Header) error {
			if !strings.Contains(seen[0].Get("Via"), "1.1 node-") {
				return fmt.Errorf("origin saw Via %q", seen[0].Get("Via"))
			}
			return nil
		}}}},
		{"3.1", "stored response header is replayed as the origin sent it", versioned("Cache-Control", "max-age=60", "X-Custom", "a", "X-Custom", "b"),
			[]rfcStep{{}, {cache: "HIT", check: func(resp *http.Response, _ string, _ []http.Header) error {
				if got := resp.Header.Values("X-Custom"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
					return fmt.Errorf("X-Custom %q, want [a b]", got)
				}
				return nil
			}}}},
		{"9110 15.3.5", "204 with max-age is stored", fixed(204, "", ma60...), []rfcStep{{code: 204}, {code: 204, cache: "HIT", origin: 1}}},
		{"9110 15.4.2", "301 is cacheable by default with heuristic freshness", fixed(301, "", "Location", "/x", "Last-Modified", httpDate(-100*24*time.Hour)),
			[]rfcStep{{code: 301}, {code: 301, cache: "HIT", origin: 1}}},

		// RFC 9112 6 and 7: framing. net/http's client takes only a single
		// "chunked"; a node fetches any other valid Transfer-Encoding again
		// on a connection of its own (so the origin sees two requests) and
		// decodes it.
		{"9112 6.1", "gzip then chunked is decoded, stored and sent with a length of its own",
			rawAnswer([]string{"Cache-Control: max-age=60", "Transfer-Encoding: gzip, chunked"}, chunked(gzipped("coded body"))),
			[]rfcStep{{cache: "MISS", origin: 2, body: "coded body", check: noTransferEncoding}, {cache: "HIT", origin: 2, body: "coded body", check: noTransferEncoding}}},
		{"9112 6.1", "a transfer-coding list over two field lines", rawAnswer([]string{"Cache-Control: max-age=60", "Transfer-Encoding: gzip", "Transfer-Encoding: chunked"},
			chunked(gzipped("two lines"))),
			[]rfcStep{{body: "two lines", check: noTransferEncoding}, {cache: "HIT", origin: 2, body: "two lines"}}},
		{"9112 6.3", "gzip not ending in chunked: the body ends with the connection", rawAnswer([]string{"Cache-Control: max-age=60", "Transfer-Encoding: gzip"},
			gzipped("until close")),
			[]rfcStep{{body: "until close", check: noTransferEncoding}, {cache: "HIT", origin: 2, body: "until close"}}},
		{"9112 6.3", "Transfer-Encoding overrides Content-Length", rawAnswer([]string{"Cache-Control: max-age=60", "Content-Length: 3", "Transfer-Encoding: deflate, chunked"},
			chunked(deflated("longer than three"))),
			[]rfcStep{{body: "longer than three"}, {cache: "HIT", origin: 2, body: "longer than three"}}},
		{"9112 6.1", "a transfer coding the node cannot decode is a 502, never stored", rawAnswer([]string{"Cache-Control: max-age=60", "Transfer-Encoding: compress, chunked"},
			chunked([]byte("not really compressed"))),
			[]rfcStep{{code: 502, check: proxyStatus("error=http_response_transfer_coding", `transfer coding \"compress\"`)}, {code: 502, origin: 4}}},
		{"9110 7.6.1", "fields named in Connection are not forwarded", fixed(200, "v1", "Cache-Control", "max-age=60", "Connection", "X-Hop-Private", "X-Hop-Private", "secret"),
			[]rfcStep{{check: noField("X-Hop-Private")}, {cache: "HIT", check: noField("X-Hop-Private")}}},
	}
}

// negotiated answers in the language the request prefers (its first
// Accept-Language range), naming it in Content-Language, varying on
// Accept-Language.
func negotiated() func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		lang, _, _ := strings.Cut(r.Header.Get("Accept-Language"), ",")
		lang, _, _ = strings.Cut(lang, ";")
		lang = strings.ToLower(strings.TrimSpace(lang))
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		w.Header().Set("Content-Language", lang)
		io.WriteString(w, lang)
	}
}

// rawAnswer hijacks the connection and writes a 200 with the head fields
// and body exactly as given, then closes the connection.
func rawAnswer(fields []string, body []byte) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\n" + strings.Join(fields, "\r\n") + "\r\nConnection: close\r\n\r\n")
		bw.Write(body)
		bw.Flush()
	}
}

// chunked frames b in chunks of at most 7 bytes, as a chunked body.
func chunked(b []byte) []byte {
	var out bytes.Buffer
	for len(b) > 0 {
		n := min(len(b), 7)
		fmt.Fprintf(&out, "%x\r\n%s\r\n", n, b[:n])
		b = b[n:]
	}
	out.WriteString("0\r\n\r\n")
	return out.Bytes()
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

// deflated is s in the "deflate" coding: the zlib format (RFC 9110 8.4.1.2).
func deflated(s string) []byte {
	var b bytes.Buffer
	zw := zlib.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

// proxyStatus checks that the answer's Proxy-Status holds each of parts.
func proxyStatus(parts ...string) func(*http.Response, string, []http.Header) error {
	return func(resp *http.Response, _ string, _ []http.Header) error {
		ps := strings.Join(resp.Header.Values("Proxy-Status"), ", ")
		for _, p := range parts {
			if !strings.Contains(ps, p) {
				return fmt.Errorf("Proxy-Status %q, want it to hold %s", ps, p)
			}
		}
		return nil
	}
}

// notStored checks that Cache-Status does not say the answer was stored.
func notStored(resp *http.Response, _ string, _ []http.Header) error {
	if cs := resp.Header.Get("Cache-Status"); strings.Contains(cs, "; stored") {
		return fmt.Errorf("Cache-Status %q says stored", cs)
	}
	return nil
}

// staleHit checks the Cache-Status of a stale answer: a hit with a
// negative ttl.
func staleHit(resp *http.Response, _ string, _ []http.Header) error {
	cs := resp.Header.Get("Cache-Status")
	if !strings.Contains(cs, "; hit; ttl=-") {
		return fmt.Errorf("Cache-Status %q, want a hit with a negative ttl", cs)
	}
	return nil
}

func noTransferEncoding(resp *http.Response, _ string, _ []http.Header) error {
	if len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] != "chunked" || resp.Header.Get("Content-Encoding") != "" {
		return fmt.Errorf("answer framed with Transfer-Encoding %v, Content-Encoding %q; want the decoded content",
			resp.TransferEncoding, resp.Header.Get("Content-Encoding"))
	}
	return nil
}

func noField(name string) func(*http.Response, string, []http.Header) error {
	return func(resp *http.Response, _ string, _ []http.Header) error {
		if v := resp.Header.Values(name); len(v) > 0 {
			return fmt.Errorf("answer carries %s %q, which the origin named in Connection", name, v)
		}
		return nil
	}
}

// TestRFC9111Conformance runs every case through the owner and through a
// relaying node of a dev cluster.
func TestRFC9111Conformance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cases := rfcCases()
	underPolicy := len(cases) // cases from here on run under suitePolicy
	cases = append(cases, policyCases()...)
	if len(cases) < 60 {
		t.Fatalf("%d cases; the suite promises at least 60", len(cases))
	}
	t.Logf("%d cases, each through the owner and through a relaying node", len(cases))
	o := &rfcOrigin{cases: cases, seen: map[string][]http.Header{}}
	osrv := httptest.NewServer(o)
	defer osrv.Close()
	off := devPortOffset(t)
	runtimeDir := t.TempDir() // where the dev cluster writes its admin token
	t.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	startDev(t, ctx, "--origin", osrv.URL, "--port-offset", off)
	port, _ := strconv.Atoi(off)
	applySuitePolicy(t, ctx, fmt.Sprintf("127.0.0.1:%d", 7070+port), runtimeDir, off)
	members := []ring.Member{{ID: "node-1"}, {ID: "node-2"}, {ID: "node-3"}}
	rg, err := ring.New(1, members)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, variant := range []string{"owner", "relay"} {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s/%s %s", variant, c.section, c.name), func(t *testing.T) {
				id := fmt.Sprintf("%c/%d", variant[0], i)
				base := "/" + id
				if i >= underPolicy {
					base = policyPrefix + base
				}
				// The node to ask: the key's owner, or another one.
				owner := rg.Owner("http127.0.0.1" + base + c.steps[0].sub).ID
				nd := 1
				for k := 1; k <= 3; k++ {
					if (fmt.Sprintf("node-%d", k) == owner) == (variant == "owner") {
						nd = k
						break
					}
				}
				addr := devNode(off, nd).client
				for s, st := range c.steps {
					method := st.method
					if method == "" {
						method = "GET"
					}
					req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+base+st.sub, nil)
					for k := 0; k < len(st.header); k += 2 {
						req.Header.Add(st.header[k], st.header[k+1])
					}
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("step %d: %v", s+1, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := st.code
					if want == 0 {
						want = 200
					}
					if resp.StatusCode != want {
						t.Fatalf("step %d: status %d (X-Cache %q), want %d", s+1, resp.StatusCode, resp.Header.Get("X-Cache"), want)
					}
					if st.cache != "" && resp.Header.Get("X-Cache") != st.cache {
						t.Fatalf("step %d: X-Cache %q, want %q", s+1, resp.Header.Get("X-Cache"), st.cache)
					}
					if st.body != "" && string(b) != st.body {
						t.Fatalf("step %d: body %q, want %q", s+1, b, st.body)
					}
					if st.origin > 0 {
						count := func() error {
							if got := len(o.requests(id)); got != st.origin {
								return fmt.Errorf("step %d: origin saw %d requests, want %d", s+1, got, st.origin)
							}
							return nil
						}
						err := count()
						if st.eventually {
							wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
							err = eventually(wctx, count)
							wcancel()
						}
						if err != nil {
							var seen []string
							for _, h := range o.requests(id) {
								seen = append(seen, h.Get(":method")+" "+h.Get(":path")+" via "+h.Get("Via")+" inm="+h.Get("If-None-Match"))
							}
							t.Fatalf("%v; origin saw %q", err, seen)
						}
					}
					if st.check != nil {
						if err := st.check(resp, string(b), o.requests(id)); err != nil {
							t.Fatalf("step %d: %v", s+1, err)
						}
					}
				}
			})
		}
	}
}
