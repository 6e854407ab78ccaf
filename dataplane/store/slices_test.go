package store

import (
	"bytes"
	"fmt"
	"testing"
)

// Objects of a power-of-two size (slices of a large object, as a policy's
// slice_size cuts them) take one segment each, record head included: a
// budget of 64 such sizes keeps 48 of them, none evicted, where a segment
// of exactly that size made each take two (and 31 the most kept).
func TestSliceSizedObjectsTakeOneSegmentEach(t *testing.T) {
	const size = 64 << 10
	const budget = 64 * size
	s := openStore(t, t.TempDir(), func(c *Config) {
		c.DiskBytes, c.ProbationBytes, c.MemoryMaxObject = budget, -1, 1<<10
	})
	defer s.Close()
	const n = 48
	for i := range n {
		put(t, s, meta(fmt.Sprintf("slice-%d", i)), body("slice", i, size), false)
	}
	for i := range n {
		key := fmt.Sprintf("slice-%d", i)
		b, e, ok := read(t, s, key)
		if !ok {
			t.Fatalf("%s was evicted: %d objects of %d bytes through a budget of %d", key, n, size, budget)
		}
		if e.InMemory() || !bytes.Equal(b, body("slice", i, size)) {
			t.Fatalf("%s: read back %d bytes (in memory %v), not the body stored on disk", key, len(b), e.InMemory())
		}
	}
	if ev := s.Stats().Evicted["disk"]; ev != 0 {
		t.Fatalf("%d evictions with the budget not full", ev)
	}
}
