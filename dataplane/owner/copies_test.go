package owner

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/store"
)

// A key that is not hot is copied while the copies have room for it
// without an eviction, and not once they are full.
func TestCopiesWhileRoom(t *testing.T) {
	to := newTestOwner(t, cacheable("unused"))
	answer := func(body string) *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, hop.PurgeRevisionField: {"0"}},
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
