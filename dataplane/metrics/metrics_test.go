package metrics

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// A 30 s request and a 5 GB response are measured, not clamped: each lands
// in a finite classic bucket (below the last one), and in the native
// histogram's sparse buckets.
func TestLongRequestsAndLargeResponsesLandInFiniteBuckets(t *testing.T) {
	m := New()
	m.Duration.WithLabelValues(RouteRelayed).Observe(30)
	m.ResponseSize.WithLabelValues(RouteRelayed).Observe(5e9)
	m.OriginDuration.Observe(30)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range families {
		switch f.GetName() {
		case "shardcache_request_duration_seconds", "shardcache_response_size_bytes", "shardcache_origin_request_duration_seconds":
		default:
			continue
		}
		for _, mt := range f.GetMetric() {
			h := mt.GetHistogram()
			if h.GetSampleCount() != 1 {
				continue
			}
			checked++
			if !inFiniteBucket(h) {
				t.Errorf("%s: %v fell past the last finite bucket", f.GetName(), h.GetSampleSum())
			}
			if len(h.GetPositiveSpan()) == 0 {
				t.Errorf("%s: no native histogram bucket for %v", f.GetName(), h.GetSampleSum())
			}
		}
	}
	if checked != 3 {
		t.Fatalf("checked %d histograms, want 3", checked)
	}
}

// inFiniteBucket reports whether h's one observation is counted by a
// finite bucket that is not the last.
func inFiniteBucket(h *dto.Histogram) bool {
	b := h.GetBucket()
	for i, bk := range b {
		if bk.GetCumulativeCount() == 1 && !math.IsInf(bk.GetUpperBound(), 1) {
			return i < len(b)-1
		}
	}
	return false
}

func TestStatusClass(t *testing.T) {
	for code, want := range map[int]string{99: "other", 100: "1xx", 204: "2xx", 304: "3xx", 451: "4xx", 599: "5xx", 600: "other", 0: "other"} {
		if got := StatusClass(code); got != want {
			t.Errorf("StatusClass(%d) = %q, want %q", code, got, want)
		}
	}
}
