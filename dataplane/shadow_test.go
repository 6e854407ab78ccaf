package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestShadowIsAnLRUOfTheNodesSize(t *testing.T) {
	s := newShadow(3, 100)
	for _, k := range []string{"a", "b", "c", "a", "d", "b", "a"} {
		s.observe(k, 1)
	}
	// a b c fill it; a hits; d evicts b (least recent); b misses and
	// evicts c; a hits again.
	if req, hits := s.totals(); req != 7 || hits != 2 {
		t.Fatalf("requests %v, hits %v; want 7 and 2", req, hits)
	}
}

func TestShadowSamplesToBoundedMemory(t *testing.T) {
	// 20,000 keys, uniformly requested 200,000 times, in a cache that holds
	// half of them: an LRU hits about half the time.
	const keys, requests = 20_000, 200_000
	exact := newShadow(keys/2, keys)
	sampled := newShadow(keys/2, 2000)
	rng := rand.New(rand.NewPCG(1, 2))
	for range requests {
		k := fmt.Sprint("k", rng.IntN(keys))
		exact.observe(k, 1)
		sampled.observe(k, 1)
	}
	if n := len(sampled.entries); n > 2000 {
		t.Fatalf("tracks %d keys, more than its bound of 2000", n)
	}
	_, want := exact.totals()
	req, got := sampled.totals()
	t.Logf("sampled estimate %.0f hits, exact %.0f", got, want)
	if req != requests || got < want*0.9 || got > want*1.1 {
		t.Fatalf("sampled estimate %v hits of %v requests; exact %v", got, req, want)
	}
}

func TestLocalEstimateShowsWhatShardingSaves(t *testing.T) {
	osrv := httptest.NewServer(&testOrigin{})
	t.Cleanup(osrv.Close)
	a, b, _ := startPair(t, osrv.URL, noHotKeys)
	// Each key asked once of each node: sharded, the origin sees it once;
	// two local-only caches would each have fetched it.
	for i := range 50 {
		for _, n := range []*Node{a, b} {
			if resp, _ := do(t, http.MethodGet, fmt.Sprintf("http://%s/est/%d", n.ClientAddr(), i)); resp.StatusCode != 200 {
				t.Fatal(resp.Status)
			}
		}
	}
	var localMisses, originFills float64
	for _, n := range []*Node{a, b} {
		req := metricValue(t, n, "shardcache_local_estimate_requests_total")
		hits := metricValue(t, n, "shardcache_local_estimate_hits_total")
		localMisses += req - hits
		originFills += metricValue(t, n, "shardcache_origin_requests_total", `purpose="fill"`)
	}
	if localMisses != 100 || originFills != 50 {
		t.Fatalf("local-only estimate %v origin requests, sharded %v; want 100 and 50", localMisses, originFills)
	}
}
