package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// CountRequest counts into the vector's own series, whether the counter
// was resolved before or not, and past its bound of kept counters too.
func TestCountRequestCountsEverySeriesPastItsBound(t *testing.T) {
	m := New()
	m.CountRequest(RouteLocal, "HIT", "GET", "2xx")
	m.CountRequest(RouteLocal, "HIT", "GET", "2xx")
	m.CountRequest(RouteRelayed, "MISS", "GET", "2xx")
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(RouteLocal, "HIT", "GET", "2xx")); got != 2 {
		t.Fatalf("local HIT GET 2xx counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(RouteRelayed, "MISS", "GET", "2xx")); got != 1 {
		t.Fatalf("relayed MISS GET 2xx counted %v, want 1", got)
	}
	for i := range MaxRequestSeries + 10 {
		m.CountRequest(RouteLocal, fmt.Sprintf("c%d", i), "GET", "2xx")
	}
	if n := m.requests.n.Load(); n != MaxRequestSeries {
		t.Fatalf("%d counters kept, want the bound %d", n, MaxRequestSeries)
	}
	last := fmt.Sprintf("c%d", MaxRequestSeries+9)
	m.CountRequest(RouteLocal, last, "GET", "2xx")
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(RouteLocal, last, "GET", "2xx")); got != 2 {
		t.Fatalf("a series past the bound counted %v, want 2", got)
	}
}

// The kept counter against the vector's label lookup, per request.
func BenchmarkCountRequest(b *testing.B) {
	m := New()
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.CountRequest(RouteLocal, "HIT", "GET", "2xx")
		}
	})
	b.Run("vector", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Requests.WithLabelValues(RouteLocal, "HIT", "GET", "2xx").Inc()
		}
	})
}
