package owner

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"slices"
	"testing"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
)

// answerCapture is a writer that takes whole answers (reply.Answerer), as
// the client port's does, and keeps what it was given.
type answerCapture struct {
	*httptest.ResponseRecorder
	answered   bool
	status     int
	head, body []byte
}

func (a *answerCapture) Answer(status int, head, body []byte) bool {
	a.answered, a.status, a.head, a.body = true, status, slices.Clone(head), slices.Clone(body)
	return true
}

// A hit from memory written whole carries the fields, in its serialised
// head, that the header map of the general path holds: the stored ones,
// Accept-Ranges, Age, X-Cache, X-Cache-Node and Cache-Status after the
// origin's; the length from the body. A request the general path must
// answer (a conditional that matches, a Range, a HEAD) is not answered
// whole; nor is an entry holding the cluster's own targeted field.
func TestAHitWrittenWholeHoldsWhatTheHeaderMapWould(t *testing.T) {
	to := newTestOwner(t, cacheable("small body", "Content-Type", "text/plain", "Cache-Status", "origin; hit", "Vary", ""))
	to.serve(request("/w", nil)) // the miss
	general, _ := to.serve(request("/w", nil))
	w := &answerCapture{ResponseRecorder: httptest.NewRecorder()}
	w.Header().Set("Etag", "set by the front") // a stored field of the same name replaces it
	rec := reply.NewRecorder(w)
	out := to.Serve(rec, *request("/w", nil))
	if !w.answered || w.status != 200 || string(w.body) != "small body" || rec.Bytes != 10 || rec.Status != 200 {
		t.Fatalf("not answered whole: answered %v, %d %q, recorded %d bytes %d", w.answered, w.status, w.body, rec.Bytes, rec.Status)
	}
	if out.Member.Cache != httpcache.CacheHit || out.Source != SourceMemory || out.Node != "a" {
		t.Fatalf("outcome %+v", out)
	}
	got, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(w.head, "\r\n"...)))).ReadMIMEHeader()
	if err != nil {
		t.Fatalf("head %q: %v", w.head, err)
	}
	for k, vs := range w.Header() {
		got[k] = append(vs, got[k]...) // the front's fields go first
	}
	want := general.Header().Clone()
	want.Del("Content-Length") // the server's, from the body
	if len(got) != len(want) {
		t.Errorf("fields: whole %v, general %v", got, want)
	}
	for k, vs := range want {
		if !slices.Equal(got[k], vs) {
			t.Errorf("%s: whole %q, general %q", k, got[k], vs)
		}
	}
	for _, tt := range []struct {
		name string
		req  *Request
	}{
		{"a conditional that matches", request("/w", nil, "If-None-Match", `"v1"`)},
		{"a range", request("/w", nil, "Range", "bytes=0-1")},
		{"HEAD", func() *Request { r := request("/w", nil); r.HTTP.Method = http.MethodHead; return r }()},
	} {
		w := &answerCapture{ResponseRecorder: httptest.NewRecorder()}
		to.Serve(reply.NewRecorder(w), *tt.req)
		if w.answered {
			t.Errorf("%s was answered whole", tt.name)
		}
	}
}

// A hit written whole carries the request's own X-Request-Id, as the
// general path does, never one the origin sent and the store kept.
func TestAHitWrittenWholeCarriesTheRequestsID(t *testing.T) {
	to := newTestOwner(t, cacheable("small body", "X-Request-Id", "the origin's", "Vary", ""))
	to.serve(request("/id", nil)) // the miss
	general := httptest.NewRecorder()
	grec := reply.NewRecorder(general)
	grec.ID = []string{"req-1"}
	to.Serve(grec, *request("/id", nil))
	w := &answerCapture{ResponseRecorder: httptest.NewRecorder()}
	rec := reply.NewRecorder(w)
	rec.ID = []string{"req-2"}
	to.Serve(rec, *request("/id", nil))
	if !w.answered || bytes.Contains(w.head, []byte("the origin's")) || bytes.Count(w.head, []byte("X-Request-Id: req-2\r\n")) != 1 {
		t.Fatalf("answered whole %v: head %q; want X-Request-Id req-2 only", w.answered, w.head)
	}
	if got := general.Header().Values("X-Request-Id"); len(got) != 1 || got[0] != "req-1" {
		t.Fatalf("the general path's X-Request-Id %q, want req-1", got)
	}
	// The stored fields are serialised once for the entry; each answer
	// still takes its own request's id, and one without an id of its
	// own (a writer that sets none) the stored one.
	w = &answerCapture{ResponseRecorder: httptest.NewRecorder()}
	rec = reply.NewRecorder(w)
	rec.ID = []string{"req-3"}
	to.Serve(rec, *request("/id", nil))
	if !w.answered || bytes.Contains(w.head, []byte("the origin's")) || bytes.Count(w.head, []byte("X-Request-Id: req-3\r\n")) != 1 {
		t.Fatalf("the next answer whole %v: head %q; want X-Request-Id req-3 only", w.answered, w.head)
	}
	w = &answerCapture{ResponseRecorder: httptest.NewRecorder()}
	to.Serve(reply.NewRecorder(w), *request("/id", nil))
	if !w.answered || bytes.Count(w.head, []byte("X-Request-Id: the origin's\r\n")) != 1 {
		t.Fatalf("an answer whole without an id of its own %v: head %q; want the stored X-Request-Id", w.answered, w.head)
	}
}
