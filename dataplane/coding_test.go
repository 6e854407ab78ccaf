package dataplane

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/shardcache/shardcache/dataplane/httpcache"
)

// TestExpandedBodyOverMaxObjectIsNotStored: a textual answer the node
// stores zstd-coded is bounded by MaxObjectBytes as the origin's bytes,
// not as the few the store keeps: a small gzip transfer-coded body that
// expands to 8 MiB, or 8 MiB sent chunked, is passed to the client whole
// and not stored, as it would not be with its Content-Length.
func TestExpandedBodyOverMaxObjectIsNotStored(t *testing.T) {
	text := strings.Repeat("shardcache expands this line\n", (8<<20)/29)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(text))
	zw.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Cache-Control", "max-age=60")
			w.(http.Flusher).Flush() // no Content-Length: chunked
			w.Write([]byte(text))
			return
		}
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: max-age=60\r\nConnection: close\r\n"+
			"Transfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", gz.Len(), gz.Bytes())
		bw.Flush()
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL) // MaxObjectBytes 1 MiB
	for _, path := range []string{"/bomb", "/chunked"} {
		for _, want := range []string{"MISS", "MISS"} {
			resp, body := do(t, "GET", "http://"+n.ClientAddr().String()+path)
			if resp.StatusCode != http.StatusOK || body != text {
				t.Fatalf("%s: %d, %d bytes; want 200 and the origin's %d", path, resp.StatusCode, len(body), len(text))
			}
			if got := resp.Header.Get("X-Cache"); got != want {
				t.Fatalf("%s: X-Cache %s, want %s: %d bytes are over MaxObjectBytes", path, got, want, len(text))
			}
		}
	}
}

// TestCodingOnASecondLineIsKept: an origin's Content-Encoding may come as
// a list over several field lines (RFC 9110 5.3); a gzip body announced
// "identity" on one and "gzip" on the next is coded, so the node neither
// codes it again (answering "zstd" alone for zstd over gzip) nor serves
// it to a client that does not accept gzip.
func TestCodingOnASecondLineIsKept(t *testing.T) {
	var lines strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&lines, "line %d of %x\n", i, i*i*7919) // gzip to more than httpcache.MinCompress
	}
	text := lines.String()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(text))
	zw.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Add("Content-Encoding", "identity")
		if httpcache.Accepts(r.Header, "gzip") {
			w.Header().Add("Content-Encoding", "gzip")
			w.Write(gz.Bytes())
			return
		}
		io.WriteString(w, text)
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	for _, ae := range []string{"gzip, zstd", "gzip, zstd", "zstd", "zstd"} {
		req, _ := http.NewRequest("GET", "http://"+n.ClientAddr().String()+"/page", nil)
		req.Header.Set("Accept-Encoding", ae)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		codings := resp.Header.Values("Content-Encoding")
		for i := len(codings) - 1; i >= 0 && err == nil; i-- { // undo the codings, last applied first
			switch strings.TrimSpace(codings[i]) {
			case "gzip":
				var zr *gzip.Reader
				if zr, err = gzip.NewReader(bytes.NewReader(body)); err == nil {
					body, err = io.ReadAll(zr)
				}
			case "zstd":
				var d *zstd.Decoder
				if d, err = zstd.NewReader(bytes.NewReader(body)); err == nil {
					body, err = io.ReadAll(d)
					d.Close()
				}
			}
		}
		if err != nil || string(body) != text {
			t.Fatalf("Accept-Encoding %q: %s, Content-Encoding %q: the body does not decode to the origin's (%v)", ae, resp.Header.Get("X-Cache"), codings, err)
		}
		if ae == "zstd" && slices.Contains(codings, "gzip") {
			t.Fatalf("Accept-Encoding %q: %s, Content-Encoding %q: gzip for a client that does not accept it", ae, resp.Header.Get("X-Cache"), codings)
		}
	}
}

// TestNoTransformServesTheOriginsBytes: the node codes nothing a
// response's no-transform covers (RFC 9110 7.7), even one it stored coded
// before a revalidation's 304 brought the directive, nor for a request
// that asks for none (RFC 9111 5.2.1.6): a client that accepts zstd gets
// the origin's bytes.
func TestNoTransformServesTheOriginsBytes(t *testing.T) {
	text := strings.Repeat(`{"shardcache": "no-transform"}`+"\n", 400)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=60")
		if r.URL.Path == "/refreshed" {
			w.Header().Set("Cache-Control", "max-age=0")
			if r.Header.Get("If-None-Match") == `"v1"` {
				w.Header().Set("Cache-Control", "max-age=60, no-transform")
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		if r.URL.Path == "/digested" { // a 304 that brings a digest of the origin's bytes
			w.Header().Set("Cache-Control", "max-age=0")
			if r.Header.Get("If-None-Match") == `"v1"` {
				w.Header().Set("Cache-Control", "max-age=60")
				w.Header().Set("Repr-Digest", "sha-256=:AAAA:")
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		io.WriteString(w, text)
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := newRequest("GET", "http://"+n.ClientAddr().String()+path, hdr...)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ce := resp.Header.Get("Content-Encoding"); ce != "" || string(body) != text {
			t.Fatalf("GET %s %q: %s, Content-Encoding %q, %d bytes; want the origin's %d, not coded", path, hdr, resp.Header.Get("X-Cache"), ce, len(body), len(text))
		}
		return resp
	}
	get("/refreshed")
	if resp := get("/refreshed", "Accept-Encoding", "zstd"); resp.Header.Get("X-Cache") != "REVALIDATED" {
		t.Fatalf("X-Cache %q, want REVALIDATED", resp.Header.Get("X-Cache"))
	}
	get("/refreshed", "Accept-Encoding", "zstd")
	get("/digested")
	if resp := get("/digested", "Accept-Encoding", "zstd"); resp.Header.Get("X-Cache") != "REVALIDATED" {
		t.Fatalf("X-Cache %q, want REVALIDATED", resp.Header.Get("X-Cache"))
	}
	get("/digested", "Accept-Encoding", "zstd")
	get("/asked", "Accept-Encoding", "zstd", "Cache-Control", "no-transform")
	get("/asked", "Accept-Encoding", "zstd", "Cache-Control", "no-transform")
}

// TestDigestedAnswerIsNotCoded: Content-Digest and Repr-Digest are
// digests of the content as sent, after its content coding (RFC 9530 2,
// 3), as Content-MD5 was: an answer carrying one is not stored zstd-coded,
// so a client that checks it gets the bytes it was computed over.
func TestDigestedAnswerIsNotCoded(t *testing.T) {
	text := strings.Repeat(`{"shardcache": "digested"}`+"\n", 400)
	sum := sha256.Sum256([]byte(text))
	digest := "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set(strings.TrimPrefix(r.URL.Path, "/"), digest)
		io.WriteString(w, text)
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	for _, field := range []string{"Content-Digest", "Repr-Digest"} {
		for range 2 {
			req, _ := newRequest("GET", "http://"+n.ClientAddr().String()+"/"+field, "Accept-Encoding", "zstd")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			got := sha256.Sum256(body)
			if resp.Header.Get(field) != digest || got != sum {
				t.Fatalf("%s: %s, Content-Encoding %q, %d bytes: %s %q does not match the content sent", field, resp.Header.Get("X-Cache"),
					resp.Header.Get("Content-Encoding"), len(body), field, resp.Header.Get(field))
			}
		}
	}
}

// TestPersonalAnswerIsNotCoded: a page stored per user (Vary: Cookie)
// that holds the user's secret and reflects the query is not coded by
// the node (BREACH): coded, its length would tell a guess of the secret
// that matches (a prefix the compressor finds twice) from one that does
// not, to whoever sees the traffic, one request per guess.
func TestPersonalAnswerIsNotCoded(t *testing.T) {
	const secret = "csrf=8f3a9c1e5b7d2f40a6"
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Cookie")
		fmt.Fprintf(w, "<html><body>%s<form><input name=t value=%q></form><p>You searched for %s</p></body></html>",
			strings.Repeat("<p>shardcache page text</p>\n", 100), strings.TrimPrefix(r.Header.Get("Cookie"), "session="), r.URL.Query().Get("q"))
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	size := func(guess string) int {
		req, _ := newRequest("GET", "http://"+n.ClientAddr().String()+"/search?q="+guess, "Accept-Encoding", "zstd", "Cookie", "session="+secret)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ce := resp.Header.Get("Content-Encoding"); ce != "" {
			t.Logf("q=%s: Content-Encoding %q, %d bytes", guess, ce, len(body))
		}
		return len(body)
	}
	right, wrong := size(secret), size("csrf=zq0x5wmk1yvu7rhpj3")
	if right != wrong {
		t.Fatalf("a guess of the secret that matches is answered in %d bytes, one that does not in %d: the node coded a personal answer", right, wrong)
	}
}
