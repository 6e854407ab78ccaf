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

// The admission weighs a new object against what the next reclaim of its
// stripe would evict. When every object of the oldest segment was read
// since it was written, the reclaim still evicts those past its rewrite
// budget (three quarters of a segment), the least asked for of them: a
// new object asked for less often than they are, or as often, is refused;
// one asked for more often is stored. (The admission once looked only at the unread
// objects, found none, and stored anything, for the reclaim to evict an
// object asked for more often in its place.)
func TestAdmissionWeighsTheReadObjectsAReclaimWouldEvict(t *testing.T) {
	s := openStore(t, t.TempDir(), func(c *Config) { c.DiskBytes, c.ProbationBytes = 256<<10, -1 })
	defer s.Close()
	d := s.disk
	var keys []string
	for i := 0; d.growing(); i++ {
		k := fmt.Sprintf("f%d", i)
		put(t, s, meta(k), body(k, 0, 10<<10), false)
		keys = append(keys, k)
	}
	st := d.stripeOf(keyHash("new"))
	d.poolMu.Lock()
	oldest := d.owned[st.id][0]
	d.poolMu.Unlock()
	var inOldest []string
	for _, k := range keys {
		if _, ok := s.Peek(k); ok && d.stripeOf(keyHash(k)) == st && recordSeg(t, s, k) == oldest {
			inOldest = append(inOldest, k)
		}
	}
	keep, evict := st.rescuePlan(d.start(oldest), d.start(oldest+1), true)
	if len(inOldest) < 2 || len(keep)+len(evict) != len(inOldest) {
		t.Fatalf("the oldest segment holds %d objects (plan: %d kept, %d evicted); want 2 or more", len(inOldest), len(keep), len(evict))
	}
	for _, k := range inOldest {
		for range 5 {
			s.Get(k)
		}
	}
	if keep, evict = st.rescuePlan(d.start(oldest), d.start(oldest+1), true); len(evict) == 0 {
		t.Fatalf("every object of the oldest segment read: the plan keeps %d and evicts none; want some past the budget evicted", len(keep))
	}
	for _, c := range []struct {
		key  string
		uses int
		want bool
	}{{"new", 2, false}, {"tied", 5, false}, {"newer", 12, true}} {
		st := d.stripeOf(keyHash(c.key))
		st.mu.Lock()
		st.victimCache = victimSet{}
		st.mu.Unlock()
		for range c.uses {
			s.Get(c.key)
		}
		if got := offer(t, s, meta(c.key), body(c.key, 0, 10<<10), false); got != c.want {
			t.Errorf("a new object asked for %d times, against read objects asked for 5 times each: stored %v, want %v", c.uses, got, c.want)
		}
	}
}
