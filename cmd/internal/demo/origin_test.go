package demo

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func get(t *testing.T, srv *httptest.Server, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestObjectIsDeterministicAndCacheable(t *testing.T) {
	o := &Origin{}
	srv := httptest.NewServer(o)
	defer srv.Close()
	r1, b1 := get(t, srv, "/obj/1?size=1000")
	_, b2 := get(t, srv, "/obj/1?size=1000")
	_, other := get(t, srv, "/obj/2?size=1000")
	if r1.StatusCode != 200 || len(b1) != 1000 {
		t.Fatalf("status %d, %d bytes; want 200 and 1000", r1.StatusCode, len(b1))
	}
	if !bytes.Equal(b1, b2) {
		t.Fatal("the same object returned different bytes")
	}
	if bytes.Equal(b1, other) {
		t.Fatal("different objects returned the same bytes")
	}
	if cc := r1.Header.Get("Cache-Control"); cc != "public, max-age=3600" {
		t.Fatalf("Cache-Control %q", cc)
	}
	if n := o.Requests(); n != 3 {
		t.Fatalf("origin counted %d requests, want 3", n)
	}
}

func TestRangeMatchesWholeObject(t *testing.T) {
	srv := httptest.NewServer(&Origin{})
	defer srv.Close()
	_, whole := get(t, srv, "/obj/x?size=100000")
	resp, part := get(t, srv, "/obj/x?size=100000", "Range", "bytes=12345-23456")
	if resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("status %d, want 206", resp.StatusCode)
	}
	if !bytes.Equal(part, whole[12345:23457]) {
		t.Fatal("range bytes differ from the whole object's")
	}
}

func TestBadSize(t *testing.T) {
	srv := httptest.NewServer(&Origin{})
	defer srv.Close()
	for _, q := range []string{"size=-1", "size=abc", "size=99999999999999"} {
		if resp, _ := get(t, srv, "/obj/1?"+q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, resp.StatusCode)
		}
	}
}
