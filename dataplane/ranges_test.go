package dataplane

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// rangeOrigin serves /r/<size> as size deterministic bytes with a strong
// ETag and Last-Modified.
func rangeBody(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func TestRangeRequests(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Etag", `"v1"`)
		w.Header().Set("Last-Modified", "Mon, 30 Nov 2026 12:00:00 GMT")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		if r.Header.Get("Range") != "" {
			t.Errorf("a fill asked the origin for a range: %q", r.Header.Get("Range"))
		}
		w.Write(rangeBody(size))
	}))
	t.Cleanup(origin.Close)
	a, b, e := startPair(t, origin.URL, noHotKeys, func(c *Config) { c.MemoryMaxObject = 64 << 10 })
	for _, size := range []int{10_000, 300_000} { // memory tier, disk tier
		body := rangeBody(size)
		path := pathOwnedBy(t, e, fmt.Sprintf("/r%d/", size), "b") + "?size=" + strconv.Itoa(size)
		do(t, http.MethodGet, "http://"+b.ClientAddr().String()+path) // fill
		for _, via := range []*Node{b, a} {                           // the owner, and relayed
			checkRanges(t, "http://"+via.ClientAddr().String()+path, fmt.Sprintf("%d bytes via %s", size, via.ID()), body)
		}
	}
}

// checkRanges asks url for ranges of body, the whole object, and checks
// the 206, 416 and 200 answers.
func checkRanges(t *testing.T, url, name string, body []byte) {
	t.Helper()
	expect := func(hdr []string, code int, contentRange string, want []byte) {
		t.Helper()
		resp, got := do(t, http.MethodGet, url, hdr...)
		if resp.StatusCode != code || resp.Header.Get("Content-Range") != contentRange || (want != nil && got != string(want)) {
			t.Errorf("%s %v: %d %q (%d bytes); want %d %q (%d bytes)", name, hdr, resp.StatusCode,
				resp.Header.Get("Content-Range"), len(got), code, contentRange, len(want))
		}
	}
	s := len(body)
	expect([]string{"Range", "bytes=0-99"}, 206, fmt.Sprintf("bytes 0-99/%d", s), body[:100])
	expect([]string{"Range", "bytes=-100"}, 206, fmt.Sprintf("bytes %d-%d/%d", s-100, s-1, s), body[s-100:])
	expect([]string{"Range", fmt.Sprintf("bytes=%d-", s-10)}, 206, fmt.Sprintf("bytes %d-%d/%d", s-10, s-1, s), body[s-10:])
	expect([]string{"Range", fmt.Sprintf("bytes=%d-", s)}, 416, fmt.Sprintf("bytes */%d", s), nil)
	expect([]string{"Range", "bytes=x"}, 200, "", body)
	expect([]string{"Range", "bytes=5-9", "If-Range", `"v1"`}, 206, fmt.Sprintf("bytes 5-9/%d", s), body[5:10])
	expect([]string{"Range", "bytes=5-9", "If-Range", `"v0"`}, 200, "", body)
	expect([]string{"Range", "bytes=5-9", "If-Range", `W/"v1"`}, 200, "", body)
	expect([]string{"Range", "bytes=5-9", "If-Range", "Mon, 30 Nov 2026 12:00:00 GMT"}, 206, fmt.Sprintf("bytes 5-9/%d", s), body[5:10])
	expect([]string{"Range", "bytes=5-9", "If-Range", "Mon, 30 Nov 2026 11:00:00 GMT"}, 200, "", body)

	// Two ranges: multipart/byteranges, each part with its range.
	resp, got := do(t, http.MethodGet, url, "Range", "bytes=0-9,-5")
	mt, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 206 || mt != "multipart/byteranges" || resp.Header.Get("Content-Length") != strconv.Itoa(len(got)) {
		t.Fatalf("%s two ranges: %d %q, length %q for %d bytes", name, resp.StatusCode, mt, resp.Header.Get("Content-Length"), len(got))
	}
	mr := multipart.NewReader(bytes.NewReader([]byte(got)), params["boundary"])
	for _, want := range []struct {
		cr   string
		body []byte
	}{{fmt.Sprintf("bytes 0-9/%d", s), body[:10]}, {fmt.Sprintf("bytes %d-%d/%d", s-5, s-1, s), body[s-5:]}} {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := io.ReadAll(p)
		if p.Header.Get("Content-Range") != want.cr || !bytes.Equal(pb, want.body) || p.Header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("%s part %q (%d bytes), want %q", name, p.Header.Get("Content-Range"), len(pb), want.cr)
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		t.Errorf("%s: more than two parts: %v", name, err)
	}
	// HEAD with a range: the 206's header, no body.
	resp, got = do(t, http.MethodHead, url, "Range", "bytes=0-9")
	if resp.StatusCode != 206 || resp.Header.Get("Content-Length") != "10" || got != "" {
		t.Errorf("%s HEAD: %d length %q body %d", name, resp.StatusCode, resp.Header.Get("Content-Length"), len(got))
	}
}
