package dataplane

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// TestStoredPartsAreBoundedBrokenAndPurged covers what RFC 9111 3.3 leaves
// to the cache for stored partial content (the e2e suite has the rest): a
// piece that breaks off is not joined to the part, a part over the policy's
// largest object is not stored, and a purge of the URL drops the part.
func TestStoredPartsAreBoundedBrokenAndPurged(t *testing.T) {
	var sb strings.Builder
	for i := range 50 {
		fmt.Fprintf(&sb, "%02d", i) // every range has bytes of its own
	}
	body := sb.String()
	serve := func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"x"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	}
	o := &scripted{counts: map[string]int{}, handlers: map[string]func(http.ResponseWriter, *http.Request, int){
		"/parts/": serve,
		"/parts/broken": func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 2 { // the piece joining the part: promises 50 bytes, sends 10
				w.Header().Set("Cache-Control", "max-age=60")
				w.Header().Set("ETag", `"x"`)
				w.Header().Set("Content-Range", "bytes 50-99/100")
				w.Header().Set("Content-Length", "50")
				w.WriteHeader(http.StatusPartialContent)
				w.Write([]byte(body[50:60]))
				return
			}
			serve(w, r, n)
		},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "parts", PathPrefix: "/parts/", PartialContent: true},
		{Name: "small", PathPrefix: "/parts/small/", PartialContent: true, MaxObjectSize: 40},
	}}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + n.ClientAddr().String()
	get := func(path, rng string) (string, int, string) {
		t.Helper()
		resp, b := do(t, "GET", base+path, "Range", rng)
		return resp.Header.Get("X-Cache"), resp.StatusCode, b
	}
	want := func(path, rng string, cache string, origin int) {
		t.Helper()
		c, code, b := get(path, rng)
		if code != http.StatusPartialContent || c != cache || o.count(path) != origin {
			t.Fatalf("%s %s: %d %s, origin saw %d; want 206 %s, origin %d", path, rng, code, c, o.count(path), cache, origin)
		}
		first, last, _ := strings.Cut(strings.TrimPrefix(rng, "bytes="), "-")
		a, _ := strconv.Atoi(first)
		z, _ := strconv.Atoi(last)
		if b != body[a:z+1] {
			t.Fatalf("%s %s: body %q, want %q", path, rng, b, body[a:z+1])
		}
	}

	// A piece that breaks off: the client's transfer breaks, the part
	// stays as it was, and the missing bytes are asked for again.
	want("/parts/broken", "bytes=0-49", "MISS", 1)
	// A client of its own connection, which net/http does not retry on.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", base+"/parts/broken", nil)
	req.Header.Set("Range", "bytes=40-79")
	if resp, err := client.Do(req); err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil && resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("a piece that broke off was answered %d %q; want a 502 or a broken transfer", resp.StatusCode, b)
		}
	}
	want("/parts/broken", "bytes=0-49", "HIT", 2)
	want("/parts/broken", "bytes=40-79", "MISS", 3)
	want("/parts/broken", "bytes=0-79", "HIT", 3)
	want("/parts/broken", "bytes=0-99", "MISS", 4)
	want("/parts/broken", "bytes=0-99", "HIT", 4)

	// Over the policy's largest object: passed on, not stored.
	want("/parts/small/a", "bytes=0-49", "MISS", 1)
	want("/parts/small/a", "bytes=0-49", "MISS", 2)
	want("/parts/small/a", "bytes=0-29", "MISS", 3)
	want("/parts/small/a", "bytes=0-29", "HIT", 3)

	// A purge of the URL drops its part.
	want("/parts/purged", "bytes=0-49", "MISS", 1)
	want("/parts/purged", "bytes=0-9", "HIT", 1)
	done := make(chan *pb.PurgeResult, 1)
	n.ApplyPurges([]*pb.Purge{{Id: "p", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1/parts/purged", Revision: 1}},
		func(r *pb.PurgeResult) { done <- r })
	<-done
	want("/parts/purged", "bytes=0-9", "MISS", 2)
}

// TestAColdRangeIsAnsweredAsItsBytesArrive: a small range of a large
// object that is not stored is answered 206 as soon as its bytes have come
// from the origin, while the whole object is still being fetched and
// stored; once it is, the object is a hit.
func TestAColdRangeIsAnsweredAsItsBytesArrive(t *testing.T) {
	const size = 768 << 10 // stored: under the node's largest object
	release := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(make([]byte, 64<<10))
		w.(http.Flusher).Flush()
		<-release // the rest only when the test has its range
		w.Write(make([]byte, size-64<<10))
	}))
	defer origin.Close()
	defer close(release)
	_, n := startOne(t, origin.URL)
	url := "http://" + n.ClientAddr().String() + "/big"
	resp, body := do(t, "GET", url, "Range", "bytes=0-1023")
	if resp.StatusCode != http.StatusPartialContent || len(body) != 1024 || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 0-1023/%d", size) {
		t.Fatalf("a cold range: %d, %d bytes, Content-Range %q; want 206, 1024, bytes 0-1023/%d", resp.StatusCode, len(body), resp.Header.Get("Content-Range"), size)
	}
	release <- struct{}{}
	waitFor(t, "the object to be stored", func() bool {
		resp, body := do(t, "GET", url, "Range", "bytes=-10")
		return resp.StatusCode == http.StatusPartialContent && resp.Header.Get("X-Cache") == "HIT" && len(body) == 10
	})
}

// TestARangeOfAnObjectTooLargeToStoreIsCutFromIt: over the largest object
// stored, the answer is not stored, but a range of it is still a 206 cut
// from the origin's answer, and the origin's transfer ends there.
func TestARangeOfAnObjectTooLargeToStoreIsCutFromIt(t *testing.T) {
	const size = 64 << 20 // more than loopback socket buffers hold
	sent := make(chan int64, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		var n int64
		for n < size {
			k, err := w.Write(make([]byte, 32<<10))
			if n += int64(k); err != nil {
				break
			}
		}
		sent <- n
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	resp, body := do(t, "GET", "http://"+n.ClientAddr().String()+"/huge", "Range", "bytes=100-199")
	if resp.StatusCode != http.StatusPartialContent || len(body) != 100 || resp.Header.Get("X-Cache") != "MISS" {
		t.Fatalf("a range of an object too large to store: %d %s, %d bytes; want 206 MISS, 100", resp.StatusCode, resp.Header.Get("X-Cache"), len(body))
	}
	if got := <-sent; got >= size {
		t.Fatalf("the origin sent all %d bytes for a 100-byte range", got)
	}
}

// TestAPartIsNoVariant: a stored range is kept among its key's variants
// (so that dropping the key drops it) but does not count against the
// policy's max_variants.
func TestAPartIsNoVariant(t *testing.T) {
	body := strings.Repeat("x", 100)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v"`)
		if r.Header.Get("Range") == "" {
			w.Header().Set("Vary", "Accept-Language") // the whole object varies; its ranges were asked without
		}
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "parts", PathPrefix: "/", PartialContent: true, MaxVariants: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	url := "http://" + n.ClientAddr().String() + "/v"
	if resp, _ := do(t, "GET", url, "Range", "bytes=0-9"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("range: %d", resp.StatusCode)
	}
	do(t, "GET", url, "Accept-Language", "en")
	if resp, _ := do(t, "GET", url, "Accept-Language", "en"); resp.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("the one variant max_variants allows, beside a stored range: X-Cache %q, want HIT", resp.Header.Get("X-Cache"))
	}
}
