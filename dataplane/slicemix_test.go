package dataplane

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// An object whose only validators are weak (a weak ETag, a Last-Modified
// of its answer's own second: RFC 9110 8.8.2.2) is never assembled from
// slices: its slices, asked If-Range on that date, were taken from two
// versions written in one second, and the client got a complete 200 of
// both.
func TestSlicesOfAWeakETagObjectModifiedThisSecondNeverMix(t *testing.T) {
	const total, size = 1 << 20, 64 << 10
	var version atomic.Int32
	version.Store(1)
	modified := time.Now().UTC().Truncate(time.Second)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := byte(version.Load())
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Etag", fmt.Sprintf(`W/"v%d"`, v))
		w.Header().Set("Date", modified.Format(http.TimeFormat)) // modified as the answer is made
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", modified, &patterned{size: total, version: v})
	}))
	defer origin.Close()
	nodes, _ := startSlicedTrio(t, origin.URL, size)
	url := "http://" + nodes[0].ClientAddr().String() + "/s/weak?size=" + strconv.Itoa(total)
	want := func(v byte) string {
		b := make([]byte, total)
		io.ReadFull(&patterned{size: total, version: v}, b)
		return string(b)
	}
	if resp, got := do(t, http.MethodGet, url, "Range", "bytes=0-9"); resp.StatusCode != 206 || got != want(1)[:10] {
		t.Fatalf("first range: %d %q", resp.StatusCode, got)
	}
	version.Store(2) // rewritten within the same second: same length, same Last-Modified
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	v1, v2 := want(1), want(2)
	if err == nil && resp.StatusCode == 200 && string(got) != v1 && string(got) != v2 {
		i := 0
		for i < len(got) && got[i] == v1[i] {
			i++
		}
		t.Fatalf("a complete 200 (%d bytes, ETag %s) is neither version: version 1 up to byte %d, then version 2's bytes: %v",
			len(got), resp.Header.Get("Etag"), i, len(got) == total && string(got[i:]) == v2[i:])
	}
}

// TestSlicedHeadAndIfRange: HEAD of a sliced object says its whole
// length; a Range with an If-Range that does not hold (weak tag, other
// tag, other date) gets the whole object; one that holds gets the range.
func TestSlicedHeadAndIfRange(t *testing.T) {
	_, origin := newSliceOrigin(t)
	const total, size = 300_000, 64 << 10
	nodes, _ := startSlicedTrio(t, origin, size)
	body := make([]byte, total)
	io.ReadFull(&patterned{size: total, version: 1}, body)
	url := "http://" + nodes[1].ClientAddr().String() + "/s/h?size=" + strconv.Itoa(total)
	if resp, got := do(t, http.MethodHead, url); resp.StatusCode != 200 || resp.ContentLength != total || got != "" {
		t.Fatalf("HEAD: %d, CL %d", resp.StatusCode, resp.ContentLength)
	}
	if resp, _ := do(t, http.MethodHead, url, "Range", "bytes=70000-70009"); resp.StatusCode != 206 || resp.ContentLength != 10 {
		t.Fatalf("HEAD range: %d, CL %d", resp.StatusCode, resp.ContentLength)
	}
	for _, ir := range []string{`W/"v1"`, `"v2"`, "Tue, 01 Dec 2026 12:00:00 GMT"} {
		resp, got := do(t, http.MethodGet, url, "Range", "bytes=70000-70009", "If-Range", ir)
		if resp.StatusCode != 200 || got != string(body) {
			t.Errorf("If-Range %s: %d, %d bytes", ir, resp.StatusCode, len(got))
		}
	}
	for _, ir := range []string{`"v1"`, "Mon, 30 Nov 2026 12:00:00 GMT"} {
		resp, got := do(t, http.MethodGet, url, "Range", "bytes=70000-70009,-5", "If-Range", ir)
		if resp.StatusCode != 206 || !strings.Contains(got, string(body[70000:70010])) || !strings.Contains(got, string(body[total-5:])) {
			t.Errorf("If-Range %s: %d, %q", ir, resp.StatusCode, got)
		}
	}
}
