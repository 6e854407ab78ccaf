package dataplane

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

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
	// The estimate observes each request as it is recorded, just after
	// its answer.
	waitFor(t, "every request observed by the estimate", func() bool {
		return metricValue(t, a, "shardcache_local_estimate_requests_total")+metricValue(t, b, "shardcache_local_estimate_requests_total") >= 100
	})
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
