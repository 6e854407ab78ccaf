package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

// TestCollapsingAcrossTheCluster sends 200 concurrent requests for one cold
// key through all three nodes of a dev cluster: the origin, slow to answer,
// sees exactly one request.
func TestCollapsingAcrossTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var hits atomic.Int32
	osrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.(http.Flusher).Flush()
		time.Sleep(300 * time.Millisecond) // a slow origin, so the requests overlap the fill
		io.WriteString(w, strings.Repeat("z", 100_000))
	}))
	defer osrv.Close()
	off := devPortOffset(t)
	startDev(t, ctx, "--origin", osrv.URL, "--port-offset", off)

	const clients = 200
	var wg sync.WaitGroup
	var bad atomic.Int32
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for i := range clients {
		wg.Go(func() {
			if _, err := get(client, devNode(off, 1+i%3), "/collapse/cold", 100_000); err != nil {
				bad.Add(1)
				t.Log(err)
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d requests failed", bad.Load(), clients)
	}
	if got := hits.Load(); got != 1 {
		t.Fatalf("origin saw %d requests for one key from %d concurrent clients, want 1", got, clients)
	}
}

// TestAccessLogAndForwardedChain: a request relayed by a non-owner is
// logged by the node that received it with the client's address, and the
// origin gets that address in X-Forwarded-For, not a forged one.
func TestAccessLogAndForwardedChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := make(chan http.Header, 1)
	osrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Header.Clone():
		default:
		}
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "logged")
	}))
	defer osrv.Close()
	off := devPortOffset(t)
	dev := startDev(t, ctx, "--origin", osrv.URL, "--port-offset", off, "--access-log", "stdout")

	const path = "/audit/object"
	rg, err := ring.New(1, []ring.Member{{ID: "node-1"}, {ID: "node-2"}, {ID: "node-3"}})
	if err != nil {
		t.Fatal(err)
	}
	owner := rg.Owner("http127.0.0.1" + path).ID
	receiver := 1
	if owner == "node-1" {
		receiver = 2
	}
	req, _ := http.NewRequest("GET", "http://"+devNode(off, receiver).client+path, nil)
	req.Header.Set("X-Forwarded-For", "6.6.6.6") // forged by an untrusted client
	req.Header.Set("X-Real-IP", "6.6.6.6")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Cache-Node") != owner {
		t.Fatalf("served by %q, want the owner %s", resp.Header.Get("X-Cache-Node"), owner)
	}
	h := <-seen
	host := devNode(off, receiver).client
	if h.Get("X-Forwarded-For") != "127.0.0.1" || h.Get("X-Real-Ip") != "127.0.0.1" || h.Get("Forwarded") != `for=127.0.0.1;host="`+host+`";proto=http` {
		t.Fatalf("origin saw X-Forwarded-For %q, X-Real-IP %q, Forwarded %q; want the client's address only, and the host it asked",
			h.Get("X-Forwarded-For"), h.Get("X-Real-Ip"), h.Get("Forwarded"))
	}
	var line map[string]any
	err = eventually(ctx, func() error {
		for _, l := range strings.Split(dev.Output(), "\n") {
			if strings.HasPrefix(l, "{") && strings.Contains(l, `"path":"`+path+`"`) {
				return json.Unmarshal([]byte(l), &line)
			}
		}
		return fmt.Errorf("no access-log line for %s yet", path)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"client": "127.0.0.1", "forwarded_for": "127.0.0.1", "method": "GET", "route": "relayed",
		"cache": "MISS", "served_by": owner, "node": fmt.Sprintf("node-%d", receiver), "status": float64(200)}
	for k, v := range want {
		if line[k] != v {
			t.Fatalf("access log %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	for _, k := range []string{"start", "host", "bytes", "duration_ms"} {
		if _, ok := line[k]; !ok {
			t.Fatalf("access log line lacks %s: %v", k, line)
		}
	}
}
