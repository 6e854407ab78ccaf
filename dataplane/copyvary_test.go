package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A response varying on Cookie, whose Vary comes as two lines, the first
// empty (RFC 9110 5.3: one list, "Vary: , Cookie"): the owner stores it as
// a variant; a non-owner does not keep it as a copy served to everyone.
func TestCopyOfAVaryingAnswerWithAnEmptyFirstVaryLine(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Vary"] = []string{"", "Cookie"}
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "page for "+r.Header.Get("Cookie"))
	}))
	defer origin.Close()
	nodes, e := startHotTrio(t, fc, origin.URL, 1000)
	path := "/v/1"
	owners := ownersOf(t, e, "http127.0.0.1"+path, 3)
	other := nodes[owners[2]]
	resp, body := do(t, "GET", "http://"+other.ClientAddr().String()+path, "Cookie", "user=alice")
	t.Logf("alice: %d %q Vary %q X-Cache %s node %s", resp.StatusCode, body, resp.Header.Values("Vary"), resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
	resp, body = do(t, "GET", "http://"+other.ClientAddr().String()+path, "Cookie", "user=bob")
	t.Logf("bob: %d %q X-Cache %s node %s", resp.StatusCode, body, resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
	if body != "page for user=bob" {
		t.Fatalf("bob, via non-owner %s, got %q (X-Cache %s from %s): another client's variant", other.ID(), body, resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
	}
}
