package loadgen

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHistogramQuantilesOfKnownInputs(t *testing.T) {
	var h Histogram
	// 1..10000 µs, each once: the q-quantile is q*10000 µs.
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := time.Duration(q*10000) * time.Microsecond
		got := h.Quantile(q)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 1.0/(1<<subBits) {
			t.Errorf("p%v = %s, want %s within %.2f%%", q*100, got, want, 100.0/(1<<subBits))
		}
	}
	if h.Max() != 10*time.Millisecond || h.Count() != 10000 {
		t.Fatalf("max %s count %d", h.Max(), h.Count())
	}
	if h.Quantile(1) != h.Max() {
		t.Fatalf("p100 %s != max %s", h.Quantile(1), h.Max())
	}
}

func TestHistogramTailIsNotAveragedAway(t *testing.T) {
	var h Histogram
	for range 990 {
		h.Record(time.Millisecond)
	}
	for range 10 {
		h.Record(time.Second)
	}
	if p50 := h.Quantile(.5); p50 > 1010*time.Microsecond || p50 < time.Millisecond {
		t.Fatalf("p50 = %s, want about 1ms", p50)
	}
	if p99 := h.Quantile(.995); p99 < 990*time.Millisecond {
		t.Fatalf("p99.5 = %s, want about 1s", p99)
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b Histogram
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	b.Record(2 * time.Millisecond)
	a.Merge(&b)
	if a.Count() != 3 || a.Max() != 3*time.Millisecond {
		t.Fatalf("merged count %d max %s", a.Count(), a.Max())
	}
	// A quantile is its bucket's upper bound: at most 1/2^subBits above.
	if q := a.Quantile(.5); q < 2*time.Millisecond || q > 2*time.Millisecond+2*time.Millisecond/(1<<subBits) {
		t.Fatalf("merged median %s, want 2ms (+0.8%%)", q)
	}
}

func TestBucketBoundsAreConsistent(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<40 + 12345} {
		i := bucketOf(v)
		if top := bucketTop(i); top < v {
			t.Fatalf("value %d in bucket %d whose top is %d", v, i, top)
		}
		if i > 0 && bucketTop(i-1) >= v {
			t.Fatalf("value %d also fits the previous bucket (top %d)", v, bucketTop(i-1))
		}
	}
}

func TestUniformCoversKeysEvenly(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n, draws = 10, 100000
	counts := make([]int, n)
	u := Uniform(n)
	for range draws {
		counts[u.Next(r)]++
	}
	for k, c := range counts {
		if math.Abs(float64(c)-draws/n) > 0.05*draws/n {
			t.Errorf("key %d drawn %d times, want %d ± 5%%", k, c, draws/n)
		}
	}
}

func TestZipfFollowsPowerLaw(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []float64{0.8, 1.0, 1.2} {
		z := NewZipf(s, 1000)
		counts := make([]int, 1000)
		const draws = 400000
		for range draws {
			counts[z.Next(r)]++
		}
		// P(rank 1) / P(rank 2) = 2^s and P(rank 1) / P(rank 10) = 10^s.
		for _, k := range []int{2, 10} {
			got := float64(counts[0]) / float64(counts[k-1])
			want := math.Pow(float64(k), s)
			if math.Abs(got-want)/want > 0.08 {
				t.Errorf("s=%v: count(rank 1)/count(rank %d) = %.2f, want %.2f", s, k, got, want)
			}
		}
	}
}

func TestSequentialCyclesInOrder(t *testing.T) {
	s := &Sequential{n: 3}
	var got []int
	for range 7 {
		got = append(got, s.Next(nil))
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !equal(got, want) {
		t.Fatalf("sequential gave %v, want %v", got, want)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseSpecs(t *testing.T) {
	for _, bad := range []string{"zipf:0", "zipf:x", "gauss", ""} {
		if _, err := ParseKeys(bad, 10); err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
		}
	}
	if _, err := ParseKeys("uniform", 0); err == nil {
		t.Error("zero keys accepted")
	}
	sz, err := ParseSizes("1KiB-2KiB")
	if err != nil {
		t.Fatal(err)
	}
	for k := range 100 {
		v := sz.Size(k)
		if v < 1024 || v > 2048 || v != sz.Size(k) {
			t.Fatalf("key %d size %d: outside the range or not stable", k, v)
		}
	}
	if _, err := ParseSizes("2KiB-1KiB"); err == nil {
		t.Error("inverted range accepted")
	}
	if f, _ := ParseSizes("4KiB"); f.Size(7) != 4096 {
		t.Error("fixed size is not 4096")
	}
}

func TestRunCountsRequestsHitsAndErrors(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1)%4 == 0 {
			w.Header().Set("X-Cache", "MISS")
		} else {
			w.Header().Set("X-Cache", "HIT")
		}
		if strings.HasPrefix(r.URL.Path, "/obj/") {
			w.Write(make([]byte, 100))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{
		Targets: []string{srv.URL, srv.URL}, Concurrency: 4, Requests: 400,
		Keys: Uniform(50), Sizes: Fixed(100),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 400 || served.Load() != 400 {
		t.Fatalf("result counts %d requests, server saw %d; want 400", res.Requests, served.Load())
	}
	if res.Bytes != 400*100 || res.Cache["HIT"] != 300 || res.Cache["MISS"] != 100 || res.HitRatio != 0.75 {
		t.Fatalf("bytes %d, cache %v, hit ratio %v", res.Bytes, res.Cache, res.HitRatio)
	}
	if len(res.Errors) != 0 || res.Statuses["200"] != 400 {
		t.Fatalf("errors %v statuses %v", res.Errors, res.Statuses)
	}

	bad, err := Run(context.Background(), Config{
		Targets: []string{srv.URL}, Path: "/missing/{key}", Concurrency: 2, Requests: 10,
		Keys: Uniform(5), Sizes: Fixed(1),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Errors["status 4xx"] != 10 {
		t.Fatalf("errors %v, want 10 of kind status 4xx", bad.Errors)
	}
}

func TestRunStopsAtDuration(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	var progress atomic.Int32
	res, err := Run(context.Background(), Config{
		Targets: []string{srv.URL}, Concurrency: 2, Duration: 1200 * time.Millisecond,
		Keys: Uniform(5), Sizes: Fixed(0),
	}, func(Progress) { progress.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || progress.Load() == 0 || len(res.Errors) != 0 {
		t.Fatalf("requests %d, progress calls %d, errors %v", res.Requests, progress.Load(), res.Errors)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no targets":  {Requests: 1, Keys: Uniform(1), Sizes: Fixed(1)},
		"bad target":  {Targets: []string{"localhost:80"}, Requests: 1, Keys: Uniform(1), Sizes: Fixed(1)},
		"no end":      {Targets: []string{"http://x"}, Keys: Uniform(1), Sizes: Fixed(1)},
		"no keys":     {Targets: []string{"http://x"}, Requests: 1, Sizes: Fixed(1)},
		"negative cc": {Targets: []string{"http://x"}, Requests: 1, Concurrency: -1, Keys: Uniform(1), Sizes: Fixed(1)},
	} {
		if _, err := Run(context.Background(), cfg, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
