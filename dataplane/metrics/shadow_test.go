package metrics

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestShadowIsAnLRUOfTheNodesSize(t *testing.T) {
	s := NewShadow(3, 100)
	for _, k := range []string{"a", "b", "c", "a", "d", "b", "a"} {
		s.Observe(k, 1)
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
		exact.Observe(k, 1)
		sampled.Observe(k, 1)
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
