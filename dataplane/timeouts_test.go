package dataplane

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// slowBody answers size bytes in chunks, pausing between them: steady, but
// taking longer in all than the node's timeouts.
func slowBody(size, chunks int, pause time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.WriteHeader(200)
		part := bytes.Repeat([]byte("x"), size/chunks)
		for range chunks {
			w.Write(part)
			w.(http.Flusher).Flush()
			time.Sleep(pause) // the origin's pace, not a wait of the test's
		}
	}
}

// Timeouts bound waiting, never working: an origin that sends a body
// steadily for longer than the origin timeout is fetched and stored whole,
// and a client that reads a relayed body for longer than the relay timeout
// gets it whole.
func TestTimeoutsBoundWaitingNotTransfers(t *testing.T) {
	const size, chunks = 2 << 20, 8
	o := &testOrigin{}
	mux := http.NewServeMux()
	mux.Handle("/slow/", slowBody(size, chunks, 300*time.Millisecond)) // ~2.4 s in all, 0.3 s gaps
	mux.Handle("/", o)
	origin := httptest.NewServer(mux)
	defer origin.Close()
	short := func(c *Config) {
		c.OriginTimeout, c.RelayTimeout, c.HotThreshold, c.MaxObjectBytes = time.Second, 1500*time.Millisecond, -1, 8<<20
	}
	a, b, e := startPair(t, origin.URL, short)
	path := pathOwnedBy(t, e, "/slow/", "b")

	get := func(via *Node, read func(io.Reader) (int64, error)) (*http.Response, int64, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := http.Get("http://" + via.ClientAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := read(resp.Body)
		if err != nil {
			t.Fatalf("reading through %s after %d bytes: %v", via.ID(), n, err)
		}
		return resp, n, time.Since(start)
	}
	all := func(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }
	resp, n, took := get(b, all)
	if resp.Header.Get("X-Cache") != "MISS" || n != size {
		t.Fatalf("slow origin through the owner: %s, %d bytes in %s; want a MISS of %d bytes", resp.Header.Get("X-Cache"), n, took, size)
	}
	t.Logf("the origin's answer took %s against a 1s origin timeout", took)
	waitFor(t, "the slow object to be stored", func() bool {
		resp, n, _ := get(b, all)
		return resp.Header.Get("X-Cache") == "HIT" && n == size
	})

	// A slow reader through the non-owner: 64 KiB every 80 ms, over two
	// seconds against a 1.5 s relay timeout.
	slowly := func(r io.Reader) (int64, error) {
		var total int64
		buf := make([]byte, 64<<10)
		for {
			k, err := io.ReadFull(r, buf)
			total += int64(k)
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return total, nil
			}
			if err != nil {
				return total, err
			}
			time.Sleep(80 * time.Millisecond) // the client's pace
		}
	}
	resp, n, took = get(a, slowly)
	if n != size || resp.Header.Get("X-Cache-Node") != "b" {
		t.Fatalf("slow reader through the non-owner: %d bytes from %q in %s; want %d from b", n, resp.Header.Get("X-Cache-Node"), took, size)
	}
	t.Logf("the slow reader took %s against a 1.5s relay timeout", took)
}

// An origin that stops sending mid-body for longer than the origin
// timeout is given up on: the client sees a broken transfer, nothing is
// stored.
func TestAnOriginStalledMidBodyIsGivenUpOn(t *testing.T) {
	stall := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Length", "2048")
		w.Write(make([]byte, 1024))
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done(): // the node gave up and closed the connection
		}
	}))
	defer origin.Close()
	defer close(stall) // before Close, which waits for the handler
	_, n := startOne(t, origin.URL, func(c *Config) { c.OriginTimeout, c.RelayTimeout = 300*time.Millisecond, 400*time.Millisecond })
	resp, err := http.Get("http://" + n.ClientAddr().String() + "/stalled")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(got) >= 2048 {
		t.Fatalf("a stalled origin's answer: %d bytes, %v; want a broken transfer", len(got), err)
	}
	if _, ok := n.store.Peek("http127.0.0.1/stalled"); ok {
		t.Fatal("a stalled origin's partial answer was stored")
	}
}
