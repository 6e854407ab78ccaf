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

// An object larger than a segment takes its run from segments that hold
// nothing while there are any: with the budget a third used, large
// objects evict no small one (a run used to take the segments at its
// cursor, whatever they held: four small objects evicted per large one).
func TestARunTakesEmptySegmentsFirst(t *testing.T) {
	s := openStore(t, t.TempDir(), func(c *Config) {
		c.DiskBytes, c.ProbationBytes, c.MemoryMaxObject = 64*64<<10, -1, 1<<10
	})
	defer s.Close()
	for i := range 40 {
		put(t, s, meta(fmt.Sprintf("small-%d", i)), body("small", i, 30<<10), false)
	}
	for i := range 3 {
		put(t, s, meta(fmt.Sprintf("big-%d", i)), body("big", i, 100<<10), false)
	}
	for i := range 40 {
		key := fmt.Sprintf("small-%d", i)
		if b, _, ok := read(t, s, key); !ok || !bytes.Equal(b, body("small", i, 30<<10)) {
			t.Fatalf("%s: kept %v, or not its body, after three large objects in a budget a third used", key, ok)
		}
	}
	if ev := s.Stats().Evicted["disk"]; ev != 0 {
		t.Fatalf("%d evictions with most of the budget unused", ev)
	}
}
