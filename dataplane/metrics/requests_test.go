package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Requests counted through the cache of counters land in the series their
// labels name, and past the cache's bound they are still counted, by
// label, while the cache stops growing.
func TestCountRequestCountsEachSeriesAndBoundsItsCache(t *testing.T) {
	m := New()
	for range 3 {
		m.CountRequest(RouteLocal, "HIT", "GET", "2xx")
	}
	m.CountRequest(RouteRelayed, "MISS", "GET", "2xx")
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(RouteLocal, "HIT", "GET", "2xx")); got != 3 {
		t.Fatalf("local hits counted %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(RouteRelayed, "MISS", "GET", "2xx")); got != 1 {
		t.Fatalf("relayed misses counted %v, want 1", got)
	}
	for i := range maxRequestCounters + 10 {
		m.CountRequest(RouteLocal, fmt.Sprint("status-", i), "GET", "2xx")
	}
	if n := len(*m.requestCounters.m.Load()); n != maxRequestCounters {
		t.Fatalf("the cache holds %d counters, want its bound %d", n, maxRequestCounters)
	}
	last := fmt.Sprint("status-", maxRequestCounters+9)
	m.CountRequest(RouteLocal, last, "GET", "2xx")
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(RouteLocal, last, "GET", "2xx")); got != 2 {
		t.Fatalf("a series past the bound counted %v, want 2", got)
	}
}
