package metrics

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestShadowIsAnLRUOfTheNodesSize(t *testing.T) {
	s := NewShadow(3, 100)
	for _, k := range []string{"a", "b", "c", "a", "d", "b", "a"} {
		s.Observe(k, 1, time.Hour, true, time.Now())
	}
	// a b c fill it; a hits; d evicts b (least recent); b misses and
	// evicts c; a hits again.
	if req, hits := s.Totals(); req != 7 || hits != 2 {
		t.Fatalf("requests %v, hits %v; want 7 and 2", req, hits)
	}
}

func TestShadowSamplesToBoundedMemory(t *testing.T) {
	// 20,000 keys, uniformly requested 200,000 times, in a cache that holds
	// half of them: an LRU hits about half the time.
	const keys, requests = 20_000, 200_000
	exact := NewShadow(keys/2, keys)
	sampled := NewShadow(keys/2, 2000)
	rng := rand.New(rand.NewPCG(1, 2))
	for range requests {
		k := fmt.Sprint("k", rng.IntN(keys))
		exact.Observe(k, 1, time.Hour, true, time.Now())
		sampled.Observe(k, 1, time.Hour, true, time.Now())
	}
	if n := len(sampled.entries); n > 2000 {
		t.Fatalf("tracks %d keys, more than its bound of 2000", n)
	}
	_, want := exact.Totals()
	req, got := sampled.Totals()
	t.Logf("sampled estimate %.0f hits, exact %.0f", got, want)
	if req != requests || got < want*0.9 || got > want*1.1 {
		t.Fatalf("sampled estimate %v hits of %v requests; exact %v", got, req, want)
	}
}

// The estimate judges as the real store does: a response past its
// freshness is a miss (the origin is asked again), one the store may not
// keep is never a hit, and a 304 or HEAD answer (size unknown) keeps the
// object's size rather than counting it as empty.
func TestShadowHonoursFreshnessStorabilityAndSize(t *testing.T) {
	s := NewShadow(100, 100)
	now := time.Unix(1000, 0)
	s.Observe("fresh", 40, time.Minute, true, now)
	s.Observe("fresh", -1, time.Minute, true, now) // a 304 from the store: a hit, size kept
	if _, hits := s.Totals(); hits != 1 || s.used != 40 {
		t.Fatalf("hits %v, used %d; want 1 and the object's 40 bytes", hits, s.used)
	}
	now = now.Add(2 * time.Minute)
	s.Observe("fresh", 40, time.Minute, true, now) // stale by now: the origin is asked
	s.Observe("private", 10, 0, false, now)
	s.Observe("private", 10, 0, false, now)
	if req, hits := s.Totals(); req != 5 || hits != 1 {
		t.Fatalf("requests %v, hits %v; want 5 and 1 (stale and unstorable are misses)", req, hits)
	}
	if _, kept := s.entries[keyHash("private")]; kept {
		t.Error("an unstorable response is kept")
	}
	s.Observe("fresh", 40, time.Minute, true, now)
	if _, hits := s.Totals(); hits != 2 {
		t.Fatalf("hits %v after a refill, want 2", hits)
	}
}

// Observe judges freshness at the request's own time: a request that
// arrived within the lifetime is a hit, one after it a miss, whenever it
// is counted.
func TestShadowObserveTakesTheRequestsTime(t *testing.T) {
	s := NewShadow(100, 100)
	t0 := time.Unix(1000, 0)
	s.Observe("k", 40, time.Minute, true, t0)
	s.Observe("k", 40, time.Minute, true, t0.Add(30*time.Second))
	if _, hits := s.Totals(); hits != 1 {
		t.Fatalf("hits %v; want 1 (the second request within the lifetime)", hits)
	}
	s.Observe("k", 40, time.Minute, true, t0.Add(2*time.Minute))
	if req, hits := s.Totals(); req != 3 || hits != 1 {
		t.Fatalf("requests %v, hits %v; want 3 and 1 (the third after the lifetime)", req, hits)
	}
}
