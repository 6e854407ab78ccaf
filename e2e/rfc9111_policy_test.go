package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// Cases under a policy of the suite's own: their paths start with
// policyPrefix, which policyCases' policy matches.
const policyPrefix = "/policy"

// suitePolicy is the policy the cases under policyPrefix run with: partial
// content on, and no stale answers for a closed connection beyond
// stale-if-error.
func suitePolicy() *pb.CachePolicy {
	disconnected := false
	return &pb.CachePolicy{Name: "rfc9111-suite", PathPrefix: policyPrefix + "/", PartialContent: true, StaleIfDisconnected: &disconnected}
}

// partialBody is the object the partial-content cases' origins serve.
var partialBody = strings.Repeat("0123456789", 10)

// ranged serves partialBody as net/http's ServeContent does (Range,
// If-Range, 206 and 416), with an ETag etag(n) for the n-th request, or
// none when it returns "".
func ranged(etag func(n int) string, kv ...string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		for i := 0; i < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		if et := etag(n); et != "" {
			w.Header().Set("ETag", et)
		}
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(partialBody))
	}
}

func sameETag(int) string { return `"p1"` }

func newETag(n int) string { return `"p` + strconv.Itoa(n) + `"` }

func noETag(int) string { return "" }

func rangeStep(rng string, code int, cache string, origin int, checks ...func(*http.Response, string, []http.Header) error) rfcStep {
	st := rfcStep{header: []string{"Range", rng}, code: code, cache: cache, origin: origin}
	first, last, _ := strings.Cut(strings.TrimPrefix(rng, "bytes="), "-")
	if a, err := strconv.Atoi(first); err == nil && code == http.StatusPartialContent && !strings.Contains(rng, ",") {
		b, err := strconv.Atoi(last)
		if err != nil {
			b = len(partialBody) - 1
		}
		st.body = partialBody[a : b+1]
	}
	if len(checks) > 0 {
		st.check = func(resp *http.Response, body string, seen []http.Header) error {
			for _, c := range checks {
				if err := c(resp, body, seen); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return st
}

// policyCases run under suitePolicy.
func policyCases() []rfcCase {
	ma60 := []string{"Cache-Control", "max-age=60"}
	return []rfcCase{
		{"3.3", "a 206 is stored, and a range inside it is served from it", ranged(sameETag, ma60...), []rfcStep{
			rangeStep("bytes=0-49", 206, "MISS", 1, sawHeader(0, "Range", "bytes=0-49"), hasHeader("Content-Range", "bytes 0-49/100")),
			rangeStep("bytes=10-19", 206, "HIT", 1, hasHeader("Content-Range", "bytes 10-19/100")),
			rangeStep("bytes=0-9,20-29", 206, "HIT", 1),
			rangeStep("bytes=200-300", 416, "HIT", 1, hasHeader("Content-Range", "bytes */100")),
		}},
		{"3.4", "a range past the stored part asks the origin for the missing bytes only, and the parts are combined", ranged(sameETag, ma60...), []rfcStep{
			rangeStep("bytes=0-49", 206, "MISS", 1),
			rangeStep("bytes=40-79", 206, "MISS", 2, sawHeader(1, "Range", "bytes=50-79"), sawHeader(1, "If-Range", `"p1"`)),
			rangeStep("bytes=0-79", 206, "HIT", 2),
		}},
		{"3.4", "a range before the stored part asks for the bytes before it", ranged(sameETag, ma60...), []rfcStep{
			rangeStep("bytes=50-89", 206, "MISS", 1),
			rangeStep("bytes=20-59", 206, "MISS", 2, sawHeader(1, "Range", "bytes=20-49")),
			rangeStep("bytes=20-89", 206, "HIT", 2),
		}},
		{"3.4", "parts that span the object are stored as the whole response", ranged(sameETag, ma60...), []rfcStep{
			rangeStep("bytes=0-49", 206, "MISS", 1),
			rangeStep("bytes=50-", 206, "MISS", 2, sawHeader(1, "Range", "bytes=50-99")),
			{cache: "HIT", origin: 2, body: partialBody, check: hasHeader("Content-Range", "")},
			rangeStep("bytes=90-99", 206, "HIT", 2),
		}},
		{"3.4", "a piece under another validator is not combined: the whole new version is fetched", ranged(newETag, ma60...), []rfcStep{
			rangeStep("bytes=0-49", 206, "MISS", 1),
			rangeStep("bytes=40-79", 206, "MISS", 2, sawHeader(1, "If-Range", `"p1"`)), // from the whole fill, as it streams
			{cache: "HIT", origin: 2, check: hasHeader("Etag", `"p2"`)},
		}},
		{"3.4", "without a strong validator parts are never combined", ranged(noETag, "Cache-Control", "max-age=60", "Last-Modified", httpDate(-time.Hour)), []rfcStep{
			rangeStep("bytes=0-49", 206, "MISS", 1),
			rangeStep("bytes=40-79", 206, "MISS", 2, sawHeader(1, "Range", "bytes=40-79"), sawHeader(1, "If-Range", "")),
			rangeStep("bytes=45-75", 206, "HIT", 2),
			rangeStep("bytes=0-9", 206, "MISS", 3),
		}},
		{"3.3", "a 206 that may not be stored is passed on", ranged(sameETag, "Cache-Control", "no-store"), []rfcStep{
			rangeStep("bytes=0-49", 206, "MISS", 1),
			rangeStep("bytes=0-9", 206, "MISS", 2),
		}},
		{"3.3", "a request without Range is the whole fill, as before", ranged(sameETag, ma60...), []rfcStep{
			{cache: "MISS", origin: 1, body: partialBody, check: sawHeader(0, "Range", "")},
			rangeStep("bytes=10-19", 206, "HIT", 1),
		}},
		// 4.2.4 under stale_if_disconnected false: a closed connection is
		// an origin failure like any other.
		{"4.2.4", "stale_if_disconnected off: no stale answer for a closed connection", dropAfterFirst("Cache-Control", "max-age=60", "Age", "120"),
			[]rfcStep{{}, {code: 504, origin: 3}}},
		{"4.2.4", "stale_if_disconnected off: stale-if-error still serves stale", dropAfterFirst("Cache-Control", "max-age=60, stale-if-error=600", "Age", "120"),
			[]rfcStep{{}, {cache: "STALE", body: "v1", origin: 3, check: staleHit}}},
	}
}

// applySuitePolicy applies suitePolicy to the dev cluster whose control
// plane is at control, with the admin token the dev cluster wrote under
// runtimeDir, and waits until every node has it.
func applySuitePolicy(t *testing.T, ctx context.Context, control, runtimeDir, off string) {
	t.Helper()
	// The dev cluster names its token file by its control plane's
	// address when that is not the default one (cmd/internal/devtoken).
	name := "dev-token-" + strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "").Replace(control)
	token, err := os.ReadFile(filepath.Join(runtimeDir, "shardcache", name))
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(admin.Config{Address: control, Token: strings.TrimSpace(string(token))})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	applied, err := a.PutPolicy(ctx, suitePolicy(), false)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("policies=%d ", applied.GetRevision()) // the revision a node serves with
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		if err := waitReadyz(wctx, devNode(off, i), want); err != nil {
			t.Fatal(err)
		}
	}
}
