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

// An object larger than a segment takes its run of segments and no more:
// its marker goes to the stripe's current segment rather than to a new
// one (which made each such object cost a third segment, and 18 of them
// the most kept).
func TestObjectsLargerThanASegmentTakeTheirRunAlone(t *testing.T) {
	const seg = 72 << 10 // the geometry of this budget: 64 KiB and room for a head
	const size = 100 << 10
	s := openStore(t, t.TempDir(), func(c *Config) {
		c.DiskBytes, c.ProbationBytes, c.MemoryMaxObject = 64*64<<10, -1, 1<<10
	})
	defer s.Close()
	if g := s.disk.g; g.segSize != seg || size <= g.segSize || size > 2*g.segSize-2*unit {
		t.Fatalf("geometry %+v: the test wants objects of %d bytes to take runs of two segments", g, size)
	}
	const n = 24 // runs of two in 56 segments, four of them the stripes' current ones
	for i := range n {
		put(t, s, meta(fmt.Sprintf("big-%d", i)), body("big", i, size), false)
	}
	for i := range n {
		key := fmt.Sprintf("big-%d", i)
		if b, _, ok := read(t, s, key); !ok || !bytes.Equal(b, body("big", i, size)) {
			t.Fatalf("%s: kept %v, or not its body", key, ok)
		}
	}
	if ev := s.Stats().Evicted["disk"]; ev != 0 {
		t.Fatalf("%d evictions with the budget not full", ev)
	}
}
