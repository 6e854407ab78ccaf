package owner

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A key that is not hot is copied while the copies have room for it
// without an eviction, and not once they are full.
func TestCopiesWhileRoom(t *testing.T) {
	to := newTestOwner(t, cacheable("unused"))
	answer := func(body string) *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, hop.PurgeRevisionField: {"0"}, "X-Cache-Node": {"o"}, "Cache-Status": {"o; hit; ttl=60"}},
			ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
	}
	req := request("/cold", nil)
	w := httptest.NewRecorder()
	if !to.Keep(w, *req, answer("cold copy"), false) || w.Body.String() != "cold copy" || !to.HasCopy(req.Key) {
		t.Fatalf("a cold key's answer with room: kept %v, %q", to.HasCopy(req.Key), w.Body.String())
	}
	// Fill the copies to within a few bytes of their budget.
	big := &store.Entry{Key: "big", Status: 200, Header: http.Header{}, Body: make([]byte, 4<<20-8<<10), Size: 4<<20 - 8<<10, Length: 4<<20 - 8<<10}
	to.cfg.Copies.Delete(req.Key)
	if !to.cfg.Copies.Set(big) {
		t.Fatal("the copies refused the filler")
	}
	full := request("/full", nil)
	w = httptest.NewRecorder()
	if to.Keep(w, *full, answer(strings.Repeat("x", 16<<10)), false) || w.Body.Len() != 0 || w.Code != http.StatusOK || len(w.Header()) != 0 {
		t.Fatalf("a cold key's answer with the copies full was kept or written: %d %d bytes", w.Code, w.Body.Len())
	}
	// A hot key's answer is still offered: the copies' admission decides.
	w = httptest.NewRecorder()
	if !to.Keep(w, *full, answer("hot"), true) || w.Body.String() != "hot" {
		t.Fatalf("a hot key's answer with the copies full: %q", w.Body.String())
	}
}

// A copy is kept only of a fresh answer for the whole key, and a soft
// purge that covers it takes it away: the owner then serves the key
// stale while it revalidates, which a copy cannot.
func TestCopiesHoldOnlyFreshWholeAnswers(t *testing.T) {
	to := newTestOwner(t, cacheable("unused"))
	answer := func(status int, xcache, body string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Cache-Control": {"max-age=60"}, "X-Cache": {xcache}, hop.PurgeRevisionField: {"0"},
			"X-Cache-Node": {"o"}, "Cache-Status": {"o; hit; ttl=60"}},
			ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
	}
	// The owner's 416 to an unsatisfiable range carries the object's
	// freshness: it answers that range, not the key.
	ranged := request("/c", nil, "Range", "bytes=900-")
	if to.Keep(httptest.NewRecorder(), *ranged, answer(http.StatusRequestedRangeNotSatisfiable, httpcache.CacheHit, ""), false) || to.HasCopy(ranged.Key) {
		t.Fatal("an answer to a range was kept as the key's copy")
	}
	for _, xc := range []string{httpcache.CacheUpdating, httpcache.CacheStale} {
		if to.Keep(httptest.NewRecorder(), *request("/c", nil), answer(200, xc, "old"), true) || to.HasCopy(ranged.Key) {
			t.Fatalf("an answer the owner served %s was kept as a copy", xc)
		}
	}
	// An answer the owner made itself (a 504 to only-if-cached, a 502): its
	// member says neither hit nor stored.
	made := answer(http.StatusGatewayTimeout, httpcache.CacheMiss, "not cached")
	made.Header["Cache-Status"] = []string{"o; fwd=miss; detail=only-if-cached"}
	if to.Keep(httptest.NewRecorder(), *request("/made", nil), made, true) || to.HasCopy(request("/made", nil).Key) {
		t.Fatal("an answer the owner made itself was kept as a copy")
	}
	req := request("/c", nil)
	if !to.Keep(httptest.NewRecorder(), *req, answer(200, httpcache.CacheHit, "v1"), false) {
		t.Fatal("a fresh whole answer was not offered")
	}
	for range 10 { // the memory tier takes a copy a little later
		if to.HasCopy(req.Key) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	copyReq := request("/c", nil)
	copyReq.Copy = true
	if _, out := to.serve(copyReq); !out.Served {
		t.Fatal("the copy did not answer before the soft purge")
	}
	ban, err := purge.NewBan(&pb.Purge{Id: "s1", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://www.example.com/c", Revision: 1, Soft: true}, time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	to.bans.Add(ban, 1)
	if w, out := to.serve(copyReq); out.Served || w.Body.Len() != 0 || to.HasCopy(req.Key) {
		t.Fatalf("a soft-purged copy: served %v %q, still held %v", out.Served, w.Body.String(), to.HasCopy(req.Key))
	}
}
