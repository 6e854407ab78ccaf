package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// TestWarmRestartServesFromDisk warms 10,000 objects, each asked for
// twice (asked for once, an object stays on probation in memory and may
// never reach the disk), restarts the node on the same data directory, and
// reads them all back as hits.
func TestWarmRestartServesFromDisk(t *testing.T) {
	const objects = 10_000
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	dir := t.TempDir()
	var originRequests atomic.Int64
	countingOrigin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		originRequests.Add(1)
		o.ServeHTTP(w, r)
	}))
	defer countingOrigin.Close()

	fetchAll := func(n *Node, want ...string) {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		defer client.CloseIdleConnections()
		var wg sync.WaitGroup
		var bad atomic.Int64
		var first atomic.Value
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < objects; i += 4 {
					for _, want := range want {
						resp, err := client.Get(fmt.Sprintf("http://%s/obj/%d", n.ClientAddr(), i))
						if err != nil {
							bad.Add(1)
							first.CompareAndSwap(nil, err.Error())
							continue
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if string(b) != fmt.Sprintf("body of /obj/%d", i) || resp.Header.Get("X-Cache") != want {
							bad.Add(1)
							first.CompareAndSwap(nil, fmt.Sprintf("/obj/%d: %s %q", i, resp.Header.Get("X-Cache"), b))
						}
					}
				}
			})
		}
		wg.Wait()
		if bad.Load() != 0 {
			t.Fatalf("%d of %d answers not %v with the right body; first: %v", bad.Load(), objects*len(want), want, first.Load())
		}
	}

	n, stop := runNode(t, "a", fc.addr, countingOrigin.URL, func(c *Config) { c.DataDir = dir })
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	fetchAll(n, "MISS", "HIT")
	if got := originRequests.Load(); got != objects {
		t.Fatalf("warming made %d origin requests, want %d", got, objects)
	}
	stop()

	n = startNode(t, "a", fc.addr, countingOrigin.URL, func(c *Config) { c.DataDir = dir })
	fc.publish(epochOf(2, n))
	waitEpoch(t, n, 2)
	if resp, body := do(t, "GET", "http://"+n.OpsAddr().String()+"/readyz"); resp.StatusCode != 200 {
		t.Fatalf("/readyz after restart: %d %s", resp.StatusCode, body)
	}
	fetchAll(n, "HIT")
	if got := originRequests.Load(); got != objects {
		t.Fatalf("after the restart the origin saw %d more requests, want none", got-objects)
	}
	if got := metricValue(t, n, "shardcache_store_objects", `tier="disk"`); got != objects {
		t.Fatalf("shardcache_store_objects{tier=disk} = %v, want %d", got, objects)
	}
}

// TestCompressionNegotiation stores one zstd-coded object and serves it
// coded to clients that accept zstd and decoded to the others.
func TestCompressionNegotiation(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	text := strings.Repeat(`{"id": 1, "name": "shardcache", "ok": true}`+"\n", 2000)
	var hits atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v1"`)
		io.WriteString(w, text)
	}))
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL)
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	url := "http://" + n.ClientAddr().String() + "/data.json"
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}

	tests := []struct {
		acceptEncoding string
		wantCoding     string
	}{
		{"", ""},
		{"zstd", "zstd"},
		{"gzip", ""},
		{"gzip, deflate, br, zstd", "zstd"},
		{"zstd;q=0, gzip", ""},
		{"*", "zstd"},
		{"*;q=0, identity", ""},
		{"zstd;q=0.5", "zstd"},
	}
	for i, tt := range tests {
		req, _ := http.NewRequest("GET", url, nil)
		if tt.acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", tt.acceptEncoding)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("Content-Encoding"); got != tt.wantCoding {
			t.Fatalf("Accept-Encoding %q: Content-Encoding %q, want %q", tt.acceptEncoding, got, tt.wantCoding)
		}
		if !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
			t.Fatalf("Accept-Encoding %q: Vary %q lacks Accept-Encoding", tt.acceptEncoding, resp.Header.Get("Vary"))
		}
		if resp.Header.Get("ETag") != `W/"v1"` {
			t.Fatalf("Accept-Encoding %q: ETag %q, want the origin's made weak", tt.acceptEncoding, resp.Header.Get("ETag"))
		}
		body := raw
		if tt.wantCoding == "zstd" {
			d, _ := zstd.NewReader(bytes.NewReader(raw), zstd.WithDecoderConcurrency(1))
			body, err = io.ReadAll(d)
			d.Close()
			if err != nil {
				t.Fatalf("Accept-Encoding %q: body does not decode: %v", tt.acceptEncoding, err)
			}
			if len(raw) > len(text)/4 {
				t.Fatalf("zstd body of %d bytes for %d of JSON: not compressed", len(raw), len(text))
			}
		}
		if string(body) != text {
			t.Fatalf("Accept-Encoding %q: wrong body (%d bytes)", tt.acceptEncoding, len(body))
		}
		if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(raw)) {
			t.Fatalf("Accept-Encoding %q: Content-Length %s for %d bytes", tt.acceptEncoding, cl, len(raw))
		}
		if want := map[bool]string{true: "MISS", false: "HIT"}[i == 0]; resp.Header.Get("X-Cache") != want {
			t.Fatalf("request %d: X-Cache %q, want %q", i, resp.Header.Get("X-Cache"), want)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("origin saw %d requests, want 1 for one stored object", hits.Load())
	}
}

// TestFillSurvivesItsClientAndFeedsWaiters: the client that started a fill
// hangs up mid-body; a client collapsed onto the fill still gets the whole
// body as it streams, and the object is stored.
func TestFillSurvivesItsClientAndFeedsWaiters(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	half := bytes.Repeat([]byte("a"), 256<<10)
	gate := make(chan struct{})
	var hits atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(2*len(half)))
		w.Write(half)
		w.(http.Flusher).Flush()
		<-gate
		w.Write(half)
	}))
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL)
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	url := "http://" + n.ClientAddr().String() + "/big"

	// The first client reads the first bytes, then hangs up.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	// A second client joins the fill in flight.
	got := make(chan []byte, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			got <- nil
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- b
	}()
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(t, n, "shardcache_collapsed_requests_total") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second client did not join the fill")
		}
		time.Sleep(2 * time.Millisecond) // polling the node's counter
	}
	cancel()
	resp.Body.Close()
	close(gate)
	if b := <-got; len(b) != 2*len(half) {
		t.Fatalf("the collapsed client got %d bytes, want %d", len(b), 2*len(half))
	}
	r2, body := do(t, "GET", url)
	if r2.Header.Get("X-Cache") != "HIT" || len(body) != 2*len(half) || hits.Load() != 1 {
		t.Fatalf("after the fill: X-Cache %q, %d bytes, %d origin requests; want HIT, %d, 1", r2.Header.Get("X-Cache"), len(body), hits.Load(), 2*len(half))
	}
}

// TestOriginFailingMidBodyStoresNothing: a body cut short by the origin
// reaches the client as a broken transfer and is not stored.
func TestOriginFailingMidBodyStoresNothing(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	var hits atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Content-Length", "100000")
			w.Write(make([]byte, 50000))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-body
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write(make([]byte, 100000))
	}))
	origin.Config.ErrorLog = nil
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL)
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	url := "http://" + n.ClientAddr().String() + "/cut"

	// The client gets a 502 if the cut came before the node answered, a
	// broken transfer if after; never a complete 200.
	resp, err := http.Get(url)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("a body the origin cut short reached the client as complete")
	}
	r2, body := do(t, "GET", url)
	if r2.Header.Get("X-Cache") != "MISS" || len(body) != 100000 || hits.Load() != 2 {
		t.Fatalf("after the cut: X-Cache %q, %d bytes, %d origin requests; want a new MISS of 100000 bytes", r2.Header.Get("X-Cache"), len(body), hits.Load())
	}
	if r3, _ := do(t, "GET", url); r3.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("the complete body was not stored: X-Cache %q", r3.Header.Get("X-Cache"))
	}
}

// TestLargeObjectServedFromDisk: an object above the memory tier's limit
// is stored on disk only and served from there.
func TestLargeObjectServedFromDisk(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(big)
	}))
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL, func(c *Config) { c.MaxObjectBytes = 8 << 20 })
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	url := "http://" + n.ClientAddr().String() + "/big.bin"
	for _, want := range []string{"MISS", "HIT", "HIT"} {
		resp, body := do(t, "GET", url)
		if resp.Header.Get("X-Cache") != want || body != string(big) || want == "HIT" && resp.ContentLength != int64(len(big)) {
			t.Fatalf("X-Cache %q, %d bytes, Content-Length %d; want %s with the %d-byte body", resp.Header.Get("X-Cache"), len(body), resp.ContentLength, want, len(big))
		}
	}
	if got := metricValue(t, n, "shardcache_store_objects", `tier="memory"`); got != 0 {
		t.Fatalf("a 3 MiB object is in the memory tier (%v objects)", got)
	}
}

// TestFreeSpaceGuardServesWithoutStoring: below the free-space guard the
// node still answers, stores nothing, and says so in its metrics.
func TestFreeSpaceGuardServesWithoutStoring(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL, func(c *Config) { c.DiskMinFree = 1 << 62 })
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	url := "http://" + n.ClientAddr().String() + "/obj/guard"
	for range 2 {
		if resp, body := do(t, "GET", url); resp.StatusCode != 200 || body != "body of /obj/guard" || resp.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("below the guard: %d %s %q", resp.StatusCode, resp.Header.Get("X-Cache"), body)
		}
	}
	if o.count("/obj/guard") != 2 {
		t.Fatalf("origin saw %d requests; want 2, nothing stored", o.count("/obj/guard"))
	}
	if got := metricValue(t, n, "shardcache_disk_admission_paused"); got != 1 {
		t.Fatalf("shardcache_disk_admission_paused = %v, want 1", got)
	}
}

// diskOnlyNode runs one node owning every key, on dir, with 200,000-byte
// objects too large for its memory tier; get returns a GET's X-Cache, and
// fetched counts origin requests.
func diskOnlyNode(t *testing.T, dir string, opts ...func(*Config)) (a *Node, get func(path string) string, fetched *atomic.Int32) {
	t.Helper()
	fetched = new(atomic.Int32)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream") // stored as sent, not compressed into memory
		w.Write(bytes.Repeat([]byte{'d'}, 200_000))
	}))
	t.Cleanup(origin.Close)
	fc := startFakeControl(t, "127.0.0.1:0")
	a = startNode(t, "a", fc.addr, origin.URL, append([]func(*Config){func(c *Config) {
		c.DataDir, c.MemoryMaxObject = dir, 64<<10
	}}, opts...)...)
	fc.publish(epochOf(1, a))
	waitEpoch(t, a, 1)
	get = func(path string) string {
		t.Helper()
		resp, body := do(t, "GET", "http://"+a.ClientAddr().String()+path)
		if resp.StatusCode != 200 || len(body) != 200_000 {
			t.Fatalf("GET %s: %d, %d bytes", path, resp.StatusCode, len(body))
		}
		return resp.Header.Get("X-Cache")
	}
	return a, get, fetched
}

func TestCacheDirectoryDeletedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	_, get, fetched := diskOnlyNode(t, dir)
	for _, p := range []string{"/d/1", "/d/2"} {
		get(p)
		if x := get(p); x != "HIT" {
			t.Fatalf("%s: %s before the deletion", p, x)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "cache")); err != nil {
		t.Fatal(err)
	}
	// The node notices its data file gone and starts a new one.
	waitFor(t, "a new data file", func() bool {
		_, err := os.Stat(filepath.Join(dir, "cache", "segments"))
		return err == nil
	})
	// A stored object whose file is gone is fetched again, and stored again.
	if x := get("/d/1"); x == "HIT" {
		t.Fatalf("served a HIT from a deleted file (origin fetched %d)", fetched.Load())
	}
	if x := get("/d/1"); x != "HIT" {
		t.Errorf("/d/1 after the directory was made again: %s, want HIT", x)
	}
	// A new object is stored too.
	get("/d/3")
	if x := get("/d/3"); x != "HIT" {
		t.Errorf("a new object after the deletion: %s, want HIT", x)
	}
	if n := fetched.Load(); n != 4 {
		t.Errorf("origin fetched %d times, want 4 (two warm-ups, the lost one again, the new one)", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache")); err != nil {
		t.Errorf("the cache directory was not made again: %v", err)
	}
}

// TestFullDiskWhileRunning runs a node whose disk budget is larger than
// its file system (a small tmpfs) until the disk is full: every answer is
// whole, what was stored is still served, and /readyz and a metric say the
// disk tier stopped storing.
func TestFullDiskWhileRunning(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() }) // after the node stops
	a, get, fetched := diskOnlyNode(t, dir, func(c *Config) { c.DiskBytes, c.DiskMinFree = 64<<20, 1 })
	get("/f/0")
	if x := get("/f/0"); x != "HIT" {
		t.Fatalf("/f/0 before the disk is full: %s, want HIT", x)
	}
	for i := 1; i < 60; i++ { // 12 MB on 8 MB: the disk fills on the way
		get(fmt.Sprintf("/f/%d", i))
	}
	waitFor(t, "a stripe to say it stopped", func() bool {
		return metricValue(t, a, "shardcache_disk_stripes_stopped") > 0
	})
	if x := get("/f/0"); x != "HIT" {
		t.Errorf("an object stored before the disk filled: %s, want HIT", x)
	}
	resp, body := do(t, "GET", "http://"+a.OpsAddr().String()+"/readyz")
	if resp.StatusCode != 200 || !strings.Contains(body, "disk=degraded") || !strings.Contains(body, "no space left") {
		t.Errorf("/readyz with the disk full: %d %q; want ready, saying the disk tier is degraded", resp.StatusCode, body)
	}
	if n := fetched.Load(); n < 60 {
		t.Errorf("origin fetched %d times, want at least 60", n)
	}
}

// A fill the disk tier's admission refuses (asked for less often than what
// it would evict) is still answered whole to the request that made it: the
// leader's reader is taken before the body is copied, so a small body
// copied and refused at once does not leave it with nothing (a 502).
func TestAFillRefusedByAdmissionIsStillAnswered(t *testing.T) {
	const size = 16 << 10 // copied at once: the race a larger body hides
	// Incompressible bodies, so that records take their size on disk.
	body := func(path string) []byte {
		b := make([]byte, size)
		var seed uint64
		for _, c := range path {
			seed = seed*31 + uint64(c)
		}
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body(r.URL.Path))
	}))
	defer origin.Close()
	// Larger than the memory tier takes: straight to disk, no probation.
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.DiskBytes, c.MaxObjectBytes, c.MemoryMaxObject = 1<<20, 256<<10, 8<<10 })
	base := "http://" + n.ClientAddr().String()
	// Popular objects fill the disk tier.
	for i := range 70 {
		for range 3 {
			if resp, _ := do(t, "GET", fmt.Sprintf("%s/obj/popular-%d", base, i)); resp.StatusCode != 200 {
				t.Fatalf("popular %d: %d", i, resp.StatusCode)
			}
		}
	}
	refused0 := metricValue(t, n, "shardcache_store_rejections_total", `tier="disk"`)
	// Objects asked for once each, by several clients at once (the
	// leader busy, its fill quick): refused by admission, answered anyway.
	var wg sync.WaitGroup
	var next atomic.Int32
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= 400; i = int(next.Add(1)) {
				path := fmt.Sprintf("/obj/once-%d", i)
				if resp, got := do(t, "GET", base+path); resp.StatusCode != 200 || got != string(body(path)) {
					t.Errorf("%s, asked once: %d, %d bytes", path, resp.StatusCode, len(got))
					return
				}
			}
		})
	}
	wg.Wait()
	if refused := metricValue(t, n, "shardcache_store_rejections_total", `tier="disk"`) - refused0; refused == 0 {
		t.Fatal("admission refused nothing: the test no longer shows a refused fill")
	}
}
