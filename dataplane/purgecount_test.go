package dataplane

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A purge's count reaches the control plane no later than the applied
// revision that completes it, where the node removed objects at once; and
// a sweep that outlasts purgeAckWithin still sends its whole count when it
// ends, after the count so far.
func TestAPurgeCountsWhatItRemovedByTheTimeItIsAcknowledged(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		if r.URL.Path == "/slow" {
			w.Header().Set("Content-Length", "4")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			started <- struct{}{}
			<-release // the fill stays in flight until the test lets it end
		}
		io.WriteString(w, "body")
	}))
	t.Cleanup(origin.Close)
	defer close(release)
	fc, n := startOne(t, origin.URL, func(c *Config) { c.HotThreshold = -1 })
	base := "http://" + n.ClientAddr().String()
	for _, p := range []string{"/a/1", "/a/2"} {
		for _, want := range []string{"MISS", "HIT"} {
			if resp, _ := do(t, http.MethodGet, base+p); resp.Header.Get("X-Cache") != want {
				t.Fatalf("GET %s: %s, want %s", p, resp.Header.Get("X-Cache"), want)
			}
		}
	}
	// next is the node's next purge result.
	next := func(what string) *pb.PurgeResult {
		t.Helper()
		select {
		case r := <-fc.results:
			return r
		case <-time.After(30 * time.Second):
			t.Fatalf("no purge result in 30 s; waiting for %s", what)
			return nil
		}
	}

	// An exact purge: what it removed is counted ahead of the applied
	// revision, so the status that completes it says so.
	fc.pushPurge(&pb.Purge{Id: "url", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1/a/1", Revision: 10})
	counted := false
	for {
		r := next("the URL purge's whole count")
		if r.GetPurgeId() == "" && r.GetRevisionApplied() >= 10 && !counted {
			t.Fatalf("the node applied revision %d before it said what the purge removed", r.GetRevisionApplied())
		}
		if r.GetPurgeId() != "url" {
			continue
		}
		if r.GetObjectsRemoved() != 1 {
			t.Fatalf("URL purge result %v: want 1 object removed", r)
		}
		counted = true
		if !r.GetSweeping() {
			break
		}
	}

	// A fill in flight that began before a purge holds its sweep back:
	// the count so far comes after purgeAckWithin, the whole one when the
	// sweep has run.
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/slow", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-started
	fc.pushPurge(&pb.Purge{Id: "prefix", Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: "127.0.0.1", PathPrefix: "/a/", Revision: 11})
	for {
		r := next("the prefix purge's count so far")
		if r.GetPurgeId() != "prefix" {
			continue
		}
		if !r.GetSweeping() || r.GetObjectsRemoved() != 0 {
			t.Fatalf("prefix purge result %v while a fill older than it runs: want sweeping, nothing removed yet", r)
		}
		break
	}
	release <- struct{}{}
	for {
		r := next("the prefix purge's whole count, once its sweep has run")
		if r.GetPurgeId() != "prefix" {
			continue
		}
		if r.GetSweeping() || r.GetObjectsRemoved() != 1 {
			t.Fatalf("prefix purge result %v after the fill ended: want its sweep done, 1 object removed", r)
		}
		break
	}
	if resp, _ := do(t, http.MethodGet, base+"/a/2"); resp.Header.Get("X-Cache") != "MISS" {
		t.Fatalf("GET /a/2 after the prefix purge: %s, want MISS", resp.Header.Get("X-Cache"))
	}
}
