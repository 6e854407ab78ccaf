package dataplane

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/logstream"
)

// Log streams are bounded per caller as well as overall: one holder of
// the read-only ops token (a dashboard) must not take every stream and
// lock the operators with the admin token out of `cachectl log`.
func TestOneCallerCannotTakeEveryLogStream(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.AdminToken = "admin-s3cret"; c.OpsToken = "read-only" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(token string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.OpsAddr().String()+"/log", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	held := 0
	for range 32 {
		if r := open("read-only"); r.StatusCode == 200 {
			held++
		} else {
			break
		}
	}
	if held != logstream.MaxCaller {
		t.Fatalf("one caller opened %d streams, want the per-caller bound %d, then a refusal", held, logstream.MaxCaller)
	}
	if r := open("admin-s3cret"); r.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 200))
		t.Fatalf("one caller holding %d streams locks every other caller out: %d %s", held, r.StatusCode, b)
	}
}
