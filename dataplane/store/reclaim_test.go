package store

import (
	"bytes"
	"fmt"
	"testing"
)

// keyOfStripe returns the first key named prefix+n of stripe i.
func keyOfStripe(s *Store, prefix string, i int) string {
	for n := 0; ; n++ {
		k := fmt.Sprintf("%s%d", prefix, n)
		if s.disk.stripeOf(keyHash(k)).id == i {
			return k
		}
	}
}

// A run whose fill never committed (aborted, or cut short by a kill and
// left behind at the restart) follows its stripe's current segment: only
// a committed run's marker makes the stripe move on to a newer segment. A
// run taken later at the run cursor over it reclaims that stripe's
// segments through it, and used to take the current one with them: its
// objects were evicted, and the stripe went on writing there, so that what
// it committed next, synced, was lost at the restart (the segment's header
// cleared, or the segment reopened by another stripe, its records then
// read under that stripe's seq).
func TestAReclaimLeavesTheSegmentItsStripeWrites(t *testing.T) {
	dir := t.TempDir()
	cfg := func(c *Config) {
		c.DiskBytes, c.Sync, c.MemoryMaxObject, c.ProbationBytes, c.AdmissionPeriod = 1<<20, true, 1, -1, -1
	}
	s := openStore(t, dir, cfg)
	d := s.disk
	for i := 0; d.growing() || i < 200; i++ { // the budget full: no segment free
		put(t, s, meta(fmt.Sprintf("f%d", i)), body("f", i, 6<<10), false)
	}
	y, x := d.stripes[0], d.stripes[1]
	older := keyOfStripe(s, "y", y.id)
	put(t, s, meta(older), body(older, 1, 6<<10), false)
	cur := y.cur
	// A large fill of stripe y takes a run, then fails.
	w, err := s.Create(meta(keyOfStripe(s, "yrun", y.id)), 60<<10, false, 1<<20)
	if err != nil || w.ext == nil || w.ext.seg.run == 0 {
		t.Fatalf("the large fill took no run: %v", err)
	}
	dead := w.ext.seg
	w.Write(make([]byte, 10<<10))
	w.Abort(fmt.Errorf("origin went away"))
	if y.cur != cur || dead.seqNow() < cur.seqNow() {
		t.Fatalf("stripe %d writes segment %d, and the dead run %d is not newer", y.id, y.cur.idx, dead.idx)
	}
	// Stripe x's writes take the segments the run's reclaim emptied; then
	// the run cursor comes round to the dead run, and x's large object
	// takes it.
	for i := 0; d.hasFree(); i++ {
		k := keyOfStripe(s, fmt.Sprintf("x%d-", i), x.id)
		put(t, s, meta(k), body(k, i, 6<<10), false)
	}
	d.poolMu.Lock()
	d.runCursor = dead.idx
	d.poolMu.Unlock()
	big := keyOfStripe(s, "xrun", x.id)
	put(t, s, meta(big), body(big, 1, 60<<10), false)
	if at := recordSeg(t, s, big); at != dead.idx {
		t.Fatalf("the large object went to segment %d, not to the dead run's %d", at, dead.idx)
	}
	d.poolMu.Lock()
	state, owner := cur.state, cur.owner
	d.poolMu.Unlock()
	if y.cur != cur || state != segOpen || owner != y.id {
		t.Errorf("stripe %d's current segment %d was reclaimed under it: state %d, owner %d", y.id, cur.idx, state, owner)
	}
	newer := keyOfStripe(s, "ynew", y.id)
	put(t, s, meta(newer), body(newer, 2, 6<<10), false)
	s.kill()
	s = openStore(t, dir, cfg)
	defer s.Close()
	for k, gen := range map[string]int{older: 1, newer: 2} {
		if b, _, ok := read(t, s, k); !ok || !bytes.Equal(b, body(k, gen, 6<<10)) {
			t.Fatalf("%s, committed and synced, was lost to the restart (read back %v)", k, ok)
		}
	}
}

// recordSeg is the segment holding key's record.
func recordSeg(t *testing.T, s *Store, key string) int {
	off, _ := recordOf(t, s, key)
	return int(off / s.disk.g.segSize)
}

// hasFree reports whether some segment holds nothing.
func (d *disk) hasFree() bool {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	for _, s := range d.segs {
		if s.state == segFree {
			return true
		}
	}
	return false
}
