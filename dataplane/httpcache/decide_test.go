package httpcache

import (
	"net/http"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	const min = time.Minute
	for _, tt := range []struct {
		name          string
		age, lifetime time.Duration
		stored, req   string // Cache-Control
		swr           time.Duration
		want          Use
		why           string // the reason DecideWhy gives
	}{
		{"fresh", 1 * min, 5 * min, "", "", 0, UseFresh, ""},
		{"no-cache request revalidates", 1 * min, 5 * min, "", "no-cache", 0, UseRevalidate, ReasonRequestNoCache},
		{"max-age below the age", 2 * min, 5 * min, "", "max-age=60", 0, UseRevalidate, ReasonRequestMaxAge},
		{"invalid max-age is 0", 1 * min, 5 * min, "", "max-age=x", 0, UseRevalidate, ReasonRequestMaxAge},
		{"min-fresh beyond what is left", 4 * min, 5 * min, "", "min-fresh=120", 0, UseRevalidate, ReasonRequestMinFresh},
		{"stale without leave", 6 * min, 5 * min, "", "", 0, UseRevalidate, ReasonExpired},
		{"max-stale with no value", 60 * min, 5 * min, "", "max-stale", 0, UseStale, ReasonMaxStale},
		{"max-stale within its limit", 6 * min, 5 * min, "", "max-stale=120", 0, UseStale, ReasonMaxStale},
		{"max-stale past its limit", 9 * min, 5 * min, "", "max-stale=120", 0, UseRevalidate, ReasonExpired},
		{"must-revalidate beats max-stale", 6 * min, 5 * min, "must-revalidate", "max-stale", 0, UseRevalidate, ReasonMustRevalidate},
		{"the policy's stale-while-revalidate", 6 * min, 5 * min, "", "", 2 * min, UseUpdating, ReasonSWR},
		{"the response's stale-while-revalidate wins", 6 * min, 5 * min, "stale-while-revalidate=30", "", 2 * min, UseRevalidate, ReasonExpired},
		{"a no-cache response is revalidated on every use", 1 * min, 0, "no-cache", "max-stale", 0, UseRevalidate, ReasonNoCache},
		{"a request's max-age refuses updating", 6 * min, 5 * min, "stale-while-revalidate=600", "max-age=9999", 0, UseRevalidate, ReasonExpired},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stored := http.Header{"Cache-Control": {tt.stored}}
			req := ForRequest(http.Header{"Cache-Control": {tt.req}})
			if got := Decide(tt.age, tt.lifetime, stored, req, tt.swr); got != tt.want {
				t.Fatalf("Decide = %v, want %v", got, tt.want)
			}
			if got, why := DecideWhy(tt.age, tt.lifetime, stored, req, tt.swr); got != tt.want || why != tt.why {
				t.Fatalf("DecideWhy = %v, %q; want %v, %q", got, why, tt.want, tt.why)
			}
		})
	}
}

func TestStaleOnError(t *testing.T) {
	const min = time.Minute
	for _, tt := range []struct {
		name        string
		age         time.Duration
		stored, req string
		window      time.Duration
		want        bool
	}{
		{"no window", 6 * min, "", "", 0, false},
		{"the policy's window", 6 * min, "", "", 2 * min, true},
		{"the response's stale-if-error", 6 * min, "stale-if-error=120", "", 0, true},
		{"the request's stale-if-error", 6 * min, "", "stale-if-error=120", 0, true},
		{"past every window", 9 * min, "stale-if-error=120", "", 1 * min, false},
		{"must-revalidate forbids it", 6 * min, "must-revalidate, stale-if-error=600", "", 10 * min, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := StaleOnError(tt.age, 5*min, http.Header{"Cache-Control": {tt.stored}}, http.Header{"Cache-Control": {tt.req}}, tt.window)
			if got != tt.want {
				t.Fatalf("StaleOnError = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStaleDisconnected(t *testing.T) {
	for _, tt := range []struct {
		stored, targeted string // Cache-Control, CDN-Cache-Control
		want             bool
	}{
		{"max-age=60", "", true},
		{"", "", true},
		{"max-age=60, stale-if-error=0", "", true},
		{"max-age=60, must-revalidate", "", false},
		{"max-age=60, proxy-revalidate", "", false},
		{"s-maxage=60", "", false},
		{"no-cache", "", false},
		{"max-age=60", "max-age=60, must-revalidate", false}, // RFC 9213: the targeted field governs
		{"must-revalidate", "max-age=60", true},
	} {
		h := http.Header{"Cache-Control": {tt.stored}}
		if tt.targeted != "" {
			h.Set("CDN-Cache-Control", tt.targeted)
		}
		if got := StaleDisconnected(h); got != tt.want {
			t.Errorf("Cache-Control %q, CDN-Cache-Control %q: %v, want %v", tt.stored, tt.targeted, got, tt.want)
		}
	}
}
