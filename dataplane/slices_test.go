package dataplane

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/slice"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// patterned is a deterministic object of size bytes, different for each
// version, readable from any offset without holding it in memory.
type patterned struct {
	size    int64
	version byte
	off     int64
}

func patternByte(off int64, version byte) byte { return byte(off*7+off/251) ^ version }

func (p *patterned) Read(b []byte) (int, error) {
	if p.off >= p.size {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.size-p.off)]
	for i := range b {
		b[i] = patternByte(p.off+int64(i), p.version)
	}
	p.off += int64(len(b))
	return len(b), nil
}

func (p *patterned) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += p.off
	case io.SeekEnd:
		off += p.size
	}
	p.off = off
	return off, nil
}

// sliceOrigin serves patterned objects: /<anything>?size=N, version
// "v<version>" as strong ETag, Range and If-Range honoured (unless
// ignoreRange); with staleHead, a range from byte 0 (slice 0) is stale at
// once. It counts requests by path and Range.
type sliceOrigin struct {
	version     atomic.Int32
	ignoreRange bool
	staleHead   bool
	mu          sync.Mutex
	seen        map[string]int // path + " " + Range
}

func newSliceOrigin(t *testing.T) (*sliceOrigin, string) {
	o := &sliceOrigin{seen: map[string]int{}}
	o.version.Store(1)
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	return o, srv.URL
}

func (o *sliceOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	size, _ := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
	v := byte(o.version.Load())
	o.mu.Lock()
	o.seen[r.URL.Path+" "+r.Header.Get("Range")]++
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "max-age=3600")
	if o.staleHead && strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") {
		w.Header().Set("Cache-Control", "max-age=0, must-revalidate")
	}
	w.Header().Set("Etag", fmt.Sprintf(`"v%d"`, v))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Last-Modified", "Mon, 30 Nov 2026 12:00:00 GMT")
	if size == 0 && strings.HasSuffix(r.URL.Path, "-416") && r.Header.Get("Range") != "" {
		w.Header().Set("Content-Range", "bytes */0") // as some origins answer for an empty object
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		return
	}
	if o.ignoreRange {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		io.Copy(w, &patterned{size: size, version: v})
		return
	}
	http.ServeContent(w, r, "", time.Time{}, &patterned{size: size, version: v})
}

// requests returns how many requests for path the origin saw, by Range.
func (o *sliceOrigin) requests(path string) map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, n := range o.seen {
		if p, rng, _ := strings.Cut(k, " "); p == path {
			out[rng] += n
		}
	}
	return out
}

// startSlicedTrio starts three nodes in one epoch with a policy slicing
// everything under /s/ into slices of size bytes.
func startSlicedTrio(t *testing.T, origin string, size int64, opts ...func(*Config)) ([]*Node, *pb.RingEpoch) {
	t.Helper()
	fc := startFakeControl(t, "127.0.0.1:0")
	var nodes []*Node
	for _, id := range []string{"a", "b", "c"} {
		nodes = append(nodes, startNode(t, id, fc.addr, origin, append([]func(*Config){noHotKeys}, opts...)...))
	}
	e := epochOf(1, nodes...)
	fc.publish(e)
	set := &pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{{Name: "sliced", PathPrefix: "/s/", SliceSize: size}}}
	for _, n := range nodes {
		waitEpoch(t, n, 1)
		if err := n.ApplyPolicies(set); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, e
}

// checkSlicesFetchedOnce checks that the origin saw each slice of an
// object of total bytes at path exactly once, and nothing else.
func checkSlicesFetchedOnce(t *testing.T, o *sliceOrigin, path string, total, size int64) {
	t.Helper()
	seen := o.requests(path)
	n := (total + size - 1) / size
	for i := range n {
		rng := fmt.Sprintf("bytes=%d-%d", i*size, i*size+size-1)
		if seen[rng] != 1 {
			t.Errorf("%s: slice %d (%s) fetched %d times from the origin, want once", path, i, rng, seen[rng])
		}
		delete(seen, rng)
	}
	if len(seen) > 0 {
		t.Errorf("%s: other origin requests: %v", path, seen)
	}
}

func TestSlicedRanges(t *testing.T) {
	o, origin := newSliceOrigin(t)
	const size = 300_000
	nodes, _ := startSlicedTrio(t, origin, 64<<10)
	body := make([]byte, size)
	io.ReadFull(&patterned{size: size, version: 1}, body)
	path := "/s/object?size=" + strconv.Itoa(size)
	for _, via := range nodes {
		url := "http://" + via.ClientAddr().String() + path
		resp, got := do(t, http.MethodGet, url)
		if resp.StatusCode != 200 || got != string(body) || resp.Header.Get("Content-Length") != strconv.Itoa(size) ||
			resp.Header.Get("Etag") != `"v1"` || resp.Header.Get("Accept-Ranges") != "bytes" {
			t.Fatalf("via %s: %d, %d bytes, header %v", via.ID(), resp.StatusCode, len(got), resp.Header)
		}
		checkRanges(t, url, "sliced via "+via.ID(), body)
		if resp, _ := do(t, http.MethodGet, url, "If-None-Match", `"v1"`); resp.StatusCode != http.StatusNotModified {
			t.Errorf("via %s: If-None-Match of the current version: %d, want 304", via.ID(), resp.StatusCode)
		}
		if resp, got := do(t, http.MethodHead, url); resp.StatusCode != 200 || resp.Header.Get("Content-Length") != strconv.Itoa(size) || got != "" {
			t.Errorf("via %s: HEAD: %d, length %q", via.ID(), resp.StatusCode, resp.Header.Get("Content-Length"))
		}
		if resp.Header.Get("X-Cache-Node") != via.ID() {
			t.Errorf("via %s: answered by %q; the node reached assembles a sliced answer", via.ID(), resp.Header.Get("X-Cache-Node"))
		}
	}
	checkSlicesFetchedOnce(t, o, "/s/object", size, 64<<10)
	// An empty object has no slice 0 (the origin answers 200 or 416): it is kept whole.
	for _, path := range []string{"/s/empty", "/s/empty-416"} {
		for range 2 {
			if resp, got := do(t, http.MethodGet, "http://"+nodes[0].ClientAddr().String()+path+"?size=0"); resp.StatusCode != 200 || got != "" {
				t.Fatalf("%s: %d %q", path, resp.StatusCode, got)
			}
		}
		if seen := o.requests(path); seen["bytes=0-65535"] != 1 || len(seen) != 1 {
			t.Errorf("%s: origin saw %v, want one request, then hits", path, seen)
		}
	}
	// Each node stored only its own slices.
	stored := 0
	for _, n := range nodes {
		c := 0
		n.store.Keys(func(k string) bool {
			if strings.Contains(k, "/s/object") && strings.Contains(k, slice.Sep) {
				c++
			}
			return true
		})
		if c == 5 {
			t.Errorf("%s stored every slice", n.ID())
		}
		stored += c
	}
	if stored != 5 {
		t.Errorf("%d slices stored over the nodes, want 5", stored)
	}
}

func TestLargeObjectRandomRangesThroughEveryNode(t *testing.T) {
	o, origin := newSliceOrigin(t)
	const total, size = 1 << 30, 4 << 20
	nodes, _ := startSlicedTrio(t, origin, size, func(c *Config) { c.DiskBytes, c.MaxObjectBytes = 1<<30, size })
	path := "/s/large?size=" + strconv.Itoa(total)
	rng := rand.New(rand.NewPCG(1, 2))
	type ask struct {
		via           *Node
		start, length int64
	}
	asks := make(chan ask)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for a := range asks {
				resp, got := do(t, http.MethodGet, "http://"+a.via.ClientAddr().String()+path,
					"Range", fmt.Sprintf("bytes=%d-%d", a.start, a.start+a.length-1))
				if resp.StatusCode != 206 || int64(len(got)) != a.length {
					t.Errorf("bytes %d+%d via %s: %d, %d bytes", a.start, a.length, a.via.ID(), resp.StatusCode, len(got))
					continue
				}
				for i := range a.length {
					if got[i] != patternByte(a.start+i, 1) {
						t.Errorf("bytes %d+%d via %s: byte %d differs from the origin's", a.start, a.length, a.via.ID(), a.start+i)
						break
					}
				}
			}
		})
	}
	for i := range 120 {
		length := 1 + rng.Int64N(3*size)
		asks <- ask{nodes[i%3], rng.Int64N(total - length), length}
	}
	close(asks)
	wg.Wait()
	// The whole object through one node: every slice, each once from the origin.
	resp, err := http.Get("http://" + nodes[2].ClientAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1<<20)
	var off int64
	for {
		k, err := io.ReadFull(resp.Body, buf)
		for i := range k {
			if buf[i] != patternByte(off+int64(i), 1) {
				t.Fatalf("whole object: byte %d differs from the origin's", off+int64(i))
			}
		}
		off += int64(k)
		if err != nil {
			break
		}
	}
	if resp.StatusCode != 200 || off != total {
		t.Fatalf("whole object: %d, %d bytes, want %d", resp.StatusCode, off, total)
	}
	checkSlicesFetchedOnce(t, o, "/s/large", total, size)
}

func TestSlicesNeverMixVersions(t *testing.T) {
	o, origin := newSliceOrigin(t)
	const total, size = 1 << 20, 64 << 10
	nodes, _ := startSlicedTrio(t, origin, size)
	want := func(v byte, start, length int64) string {
		b := make([]byte, length)
		p := &patterned{size: total, version: v, off: start}
		io.ReadFull(p, b)
		return string(b)
	}

	t.Run("changed while the body is sent", func(t *testing.T) {
		path := "/s/streamed?size=" + strconv.Itoa(total)
		url := "http://" + nodes[0].ClientAddr().String() + path
		if resp, got := do(t, http.MethodGet, url, "Range", "bytes=0-9"); resp.StatusCode != 206 || got != want(1, 0, 10) {
			t.Fatalf("first range: %d %q", resp.StatusCode, got)
		}
		o.version.Store(2) // the head (slice 0) is stored as version 1; nothing else is
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("the whole object came (%d bytes, %s) though the origin changed it after its first slice", len(got), resp.Header.Get("Etag"))
		}
		if !strings.HasPrefix(want(1, 0, total), string(got)) {
			t.Fatal("the broken answer is not a prefix of version 1")
		}
		// The stale head was dropped: the next answer is version 2, whole.
		resp2, got2 := do(t, http.MethodGet, url)
		if resp2.StatusCode != 200 || resp2.Header.Get("Etag") != `"v2"` || got2 != want(2, 0, total) {
			t.Fatalf("after the change: %d %s, %d bytes, version 2's bytes: %v", resp2.StatusCode, resp2.Header.Get("Etag"), len(got2), got2 == want(2, 0, total))
		}
	})

	t.Run("changed before the first byte", func(t *testing.T) {
		o.version.Store(1)
		path := "/s/ranged?size=" + strconv.Itoa(total)
		if resp, _ := do(t, http.MethodGet, "http://"+nodes[1].ClientAddr().String()+path, "Range", "bytes=0-9"); resp.StatusCode != 206 {
			t.Fatalf("first range: %d", resp.StatusCode)
		}
		o.version.Store(3)
		start := int64(5*size + 100)
		for _, n := range nodes {
			resp, got := do(t, http.MethodGet, "http://"+n.ClientAddr().String()+path, "Range", fmt.Sprintf("bytes=%d-%d", start, start+size))
			if resp.StatusCode != 206 || resp.Header.Get("Etag") != `"v3"` || got != want(3, start, size+1) {
				t.Fatalf("via %s after the change: %d %s, version 3's bytes: %v", n.ID(), resp.StatusCode, resp.Header.Get("Etag"), got == want(3, start, size+1))
			}
		}
	})

	t.Run("concurrent readers while it changes", func(t *testing.T) {
		o.version.Store(4)
		path := "/s/busy?size=" + strconv.Itoa(total)
		v4, v5 := want(4, 0, total), want(5, 0, total)
		var wg sync.WaitGroup
		var whole atomic.Int32
		for i := range 12 {
			wg.Go(func() {
				resp, err := http.Get("http://" + nodes[i%3].ClientAddr().String() + path)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				// A broken answer ends short, or in a reset (the client
				// port resets a connection whose answer broke off).
				case err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) &&
					!strings.Contains(err.Error(), "INTERNAL_ERROR"):
					t.Errorf("reader %d: %v", i, err)
				case err != nil: // broken off: what came must be one version's prefix
					if !strings.HasPrefix(v4, string(got)) && !strings.HasPrefix(v5, string(got)) {
						t.Errorf("reader %d: a broken answer mixes versions", i)
					}
				case string(got) != v4 && string(got) != v5:
					t.Errorf("reader %d: a whole answer (%d bytes) is neither version", i, len(got))
				default:
					whole.Add(1)
				}
			})
			if i == 5 {
				o.version.Store(5)
			}
		}
		wg.Wait()
		if whole.Load() == 0 {
			t.Error("no reader got a whole answer")
		}
	})
}

func TestSlicesFromAnOriginThatIgnoresRange(t *testing.T) {
	o, origin := newSliceOrigin(t)
	o.ignoreRange = true
	const total, size = 1<<20 + 5, 256 << 10
	nodes, _ := startSlicedTrio(t, origin, size)
	body := make([]byte, total)
	io.ReadFull(&patterned{size: total, version: 1}, body)
	path := "/s/whole-only?size=" + strconv.Itoa(total)
	resp, got := do(t, http.MethodGet, "http://"+nodes[0].ClientAddr().String()+path, "Range", "bytes=600000-700000")
	if resp.StatusCode != 206 || got != string(body[600000:700001]) {
		t.Fatalf("range: %d, %d bytes", resp.StatusCode, len(got))
	}
	for _, n := range nodes {
		if resp, got := do(t, http.MethodGet, "http://"+n.ClientAddr().String()+path); resp.StatusCode != 200 || got != string(body) {
			t.Fatalf("via %s: %d, %d bytes", n.ID(), resp.StatusCode, len(got))
		}
	}
	// One origin request per slice (each read up to its slice), none again.
	seen := o.requests("/s/whole-only")
	count := 0
	for rng, n := range seen {
		if n != 1 {
			t.Errorf("origin saw %q %d times", rng, n)
		}
		count += n
	}
	if count != 5 {
		t.Errorf("origin saw %d requests, want one per slice (5)", count)
	}
}

func TestClientCannotAskForASlice(t *testing.T) {
	o, origin := newSliceOrigin(t)
	nodes, e := startSlicedTrio(t, origin, 64<<10)
	path := pathOwnedBy(t, e, "/whole/", "b") + "?size=100000"
	// A client's slice header is dropped: the request relayed to the
	// owner asks for the whole object, and gets it.
	resp, got := do(t, http.MethodGet, "http://"+nodes[0].ClientAddr().String()+path, "X-Shardcache-Slice", "1/65536")
	if resp.StatusCode != 200 || len(got) != 100000 {
		t.Fatalf("%d, %d bytes", resp.StatusCode, len(got))
	}
	if seen := o.requests(strings.TrimSuffix(path, "?size=100000")); seen[""] != 1 || len(seen) != 1 {
		t.Fatalf("origin saw %v, want one whole-object request", seen)
	}
}

// TestASlicedAnswerTellsWhetherEverySliceWasStored: with only slice 0
// stored, a whole answer is a PARTIAL, not a HIT, and is counted so; once
// every slice is stored it is a HIT; a cold object is a MISS.
func TestASlicedAnswerTellsWhetherEverySliceWasStored(t *testing.T) {
	_, origin := newSliceOrigin(t)
	const size = 300_000 // five slices of 64 KiB
	nodes, _ := startSlicedTrio(t, origin, 64<<10)
	url := "http://" + nodes[0].ClientAddr().String() + "/s/partial?size=" + strconv.Itoa(size)
	var cacheStatus string
	xcache := func(hdr ...string) string {
		t.Helper()
		resp, _ := do(t, http.MethodGet, url, hdr...)
		cacheStatus = resp.Header.Get("Cache-Status")
		return resp.Header.Get("X-Cache")
	}
	if x := xcache("Range", "bytes=0-99"); x != "MISS" || !strings.Contains(cacheStatus, "; detail=uri-miss") {
		t.Fatalf("slice 0 of a cold object: X-Cache %q, Cache-Status %q; want MISS, detail=uri-miss", x, cacheStatus)
	}
	before := metricValue(t, nodes[0], "shardcache_requests_total", `route="sliced"`, `cache="PARTIAL"`)
	// Slice 0 is a hit: the reason is that a slice the answer needs is not
	// stored.
	if x := xcache(); x != "PARTIAL" || !strings.Contains(cacheStatus, "; fwd=partial") || !strings.HasSuffix(cacheStatus, "; detail=uri-miss") {
		t.Fatalf("the whole object with slice 0 stored only: X-Cache %q, Cache-Status %q; want PARTIAL, detail=uri-miss", x, cacheStatus)
	}
	// The request is counted as its handler ends, just after the answer.
	waitFor(t, "the PARTIAL answer to be counted", func() bool {
		return metricValue(t, nodes[0], "shardcache_requests_total", `route="sliced"`, `cache="PARTIAL"`) == before+1
	})
	if x := xcache(); x != "HIT" {
		t.Fatalf("every slice stored: X-Cache %q, want HIT", x)
	}
	if x := xcache("Range", "bytes=200000-200099"); x != "HIT" {
		t.Fatalf("a stored slice's range: X-Cache %q, want HIT", x)
	}
}

// TestASlicedAnswerNamesASliceOfAnotherVersion: the origin changes an
// object whose slices are stored; its head (slice 0), revalidated, names
// the new version, so a range in a later slice finds that slice stored as
// the old one. The answer is a MISS that says so (detail=slice-version),
// with the new version's bytes.
func TestASlicedAnswerNamesASliceOfAnotherVersion(t *testing.T) {
	o, origin := newSliceOrigin(t)
	o.staleHead = true
	const size = 64 << 10
	nodes, _ := startSlicedTrio(t, origin, size)
	url := "http://" + nodes[0].ClientAddr().String() + "/s/versions?size=" + strconv.Itoa(3*size)
	if resp, _ := do(t, http.MethodGet, url); resp.StatusCode != 200 || resp.Header.Get("Etag") != `"v1"` {
		t.Fatalf("the whole object: %d, ETag %s", resp.StatusCode, resp.Header.Get("Etag"))
	}
	start := int64(2*size + 10)
	rng := fmt.Sprintf("bytes=%d-%d", start, start+99)
	// Each slice is stored once its answer is sent: slice 2 is, once a
	// range of it is a HIT.
	waitFor(t, "slice 2 to be stored", func() bool {
		resp, _ := do(t, http.MethodGet, url, "Range", rng)
		return resp.Header.Get("X-Cache") == "HIT"
	})
	o.version.Store(2)
	// The head is fetched anew for each answer, a revalidation that may
	// join one of the old version still in flight: the first answer that
	// is not a HIT of the old version is the one to look at.
	var resp *http.Response
	var got string
	waitFor(t, "an answer with the new head", func() bool {
		resp, got = do(t, http.MethodGet, url, "Range", rng)
		return resp.Header.Get("X-Cache") != "HIT"
	})
	want := make([]byte, 100)
	io.ReadFull(&patterned{size: 3 * size, version: 2, off: start}, want)
	if cs := resp.Header.Get("Cache-Status"); resp.StatusCode != 206 || resp.Header.Get("X-Cache") != "MISS" || !strings.HasSuffix(cs, "; detail=slice-version") || got != string(want) {
		t.Fatalf("a range of slice 2 after the change: %d, X-Cache %s, Cache-Status %q, version 2's bytes: %v; want 206, a MISS, detail=slice-version",
			resp.StatusCode, resp.Header.Get("X-Cache"), cs, got == string(want))
	}
}
