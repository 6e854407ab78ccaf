package store

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A stripe is the keys of one hash range: their index (imu) and their
// writes (mu). Records are appended to the stripe's write buffer, which is
// written to its current segment in sequence when full, when a reader
// needs what it holds, on a timer, or (with Sync) at each group commit,
// where one fdatasync covers every record appended meanwhile. Lock order:
// mu, then the pool's lock, then any stripe's imu.
type stripe struct {
	d  *disk
	id int

	mu       sync.Mutex
	cond     sync.Cond // a flush or rotation ended
	cur      *segment  // nil before the first write
	pos, end int64     // next write offset, and the current segment's end
	buf      []byte    // records from bufStart on, not yet written
	bufStart int64
	spare    []byte
	// inflight is a buffer being written, with the lock released.
	inflight      []byte
	inflightStart int64
	flushing      bool
	rotating      bool
	lsn, synced   int64     // bytes appended ever; bytes written (and synced) ever
	dirtySince    time.Time // first append not yet written
	failed        error     // a disk error stopped the stripe's writes
	failedAt      time.Time
	curIdx        atomic.Int32

	imu sync.RWMutex
	tab table
	// probation holds new objects in memory until their second use.
	probation probation
	// fills are the fills in progress, by key hash: a Delete of the key
	// marks them dropped, so that none is stored after it.
	fills map[uint64][]*Writer
	// victimCache is for admission; st.mu guards it.
	victimCache victimSet
}

func newStripe(d *disk, id int) *stripe {
	st := &stripe{d: d, id: id, buf: make([]byte, 0, d.g.bufSize), spare: make([]byte, 0, d.g.bufSize)}
	st.cond.L = &st.mu
	st.curIdx.Store(-1)
	return st
}

// errStripeStopped wraps the error that stopped a stripe.
var errStripeStopped = errors.New("store: stripe stopped writing after a disk error")

// appendLocked appends rec (whole units) and returns its offset and the
// stripe's lsn after it.
func (st *stripe) appendLocked(rec []byte) (int64, int64, error) {
	return st.appendFuncLocked(int64(len(rec)), func(b []byte, seq uint64) {
		copy(b, rec)
		stamp(b, seq)
	})
}

// appendFuncLocked appends a record of n bytes (whole units) that put lays
// out in place, given its segment's seq, and returns its offset and the
// stripe's lsn after it. A record larger than the buffer is written at
// once, after what the buffer holds.
func (st *stripe) appendFuncLocked(n int64, put func(b []byte, seq uint64)) (int64, int64, error) {
	for {
		switch {
		case st.failed != nil:
			return 0, 0, fmt.Errorf("%w: %v", errStripeStopped, st.failed)
		case st.rotating:
			st.cond.Wait()
		case st.cur == nil || st.pos+n > st.end:
			if err := st.rotateLocked(); err != nil {
				return 0, 0, err
			}
		case n > int64(cap(st.buf)) && (len(st.buf) > 0 || st.flushing):
			if err := st.flushLocked(); err != nil {
				return 0, 0, err
			}
		case n > int64(cap(st.buf)):
			off := st.pos
			rec := make([]byte, n)
			put(rec, st.cur.seqNow())
			if _, err := st.d.f().WriteAt(rec, off); err != nil {
				st.failLocked("write", err, off)
				return 0, 0, err
			}
			st.pos += n
			st.bufStart = st.pos
			st.lsn += n
			return off, st.lsn, nil
		case int64(len(st.buf))+n > int64(cap(st.buf)):
			if err := st.flushLocked(); err != nil {
				return 0, 0, err
			}
		default:
			off := st.pos
			if len(st.buf) == 0 {
				st.dirtySince = time.Now()
			}
			k := len(st.buf)
			st.buf = st.buf[:k+int(n)]
			put(st.buf[k:], st.cur.seqNow())
			st.pos += n
			st.lsn += n
			return off, st.lsn, nil
		}
	}
}

// flushLocked writes the buffer out (and, with Sync, syncs the file up to
// the stripe's last append), releasing the lock while it writes: appends
// go on into the spare buffer.
func (st *stripe) flushLocked() error {
	for st.flushing {
		st.cond.Wait()
	}
	if st.failed != nil {
		return fmt.Errorf("%w: %v", errStripeStopped, st.failed)
	}
	if len(st.buf) == 0 && (!st.d.sync || st.synced >= st.lsn) {
		return nil
	}
	b, start, lsn := st.buf, st.bufStart, st.lsn
	st.inflight, st.inflightStart, st.flushing = b, start, true
	st.buf, st.spare = st.spare[:0], nil
	st.bufStart = start + int64(len(b))
	st.mu.Unlock()
	var err error
	op := "write"
	if len(b) > 0 {
		_, err = st.d.f().WriteAt(b, start)
	}
	if err == nil && st.d.sync {
		op, err = "sync", st.d.f().Sync()
	}
	st.mu.Lock()
	st.inflight, st.flushing, st.spare = nil, false, b[:0]
	if err != nil {
		st.failLocked(op, err, start)
	} else {
		st.synced = max(st.synced, lsn)
	}
	st.cond.Broadcast()
	return err
}

// fail stops the stripe's writes after a fill's write in place failed
// with err: what the stripe holds unwritten leaves the index.
func (st *stripe) fail(op string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	off := st.bufStart
	if st.flushing {
		off = st.inflightStart
	}
	st.failLocked(op, err, off)
}

// failLocked stops the stripe's writes after err, and drops from the
// index what was not written: records from off on in its segment.
func (st *stripe) failLocked(op string, err error, off int64) {
	if st.failed == nil {
		st.failed, st.failedAt = err, time.Now()
		st.d.warn(op, err, "stripe", st.id)
		st.d.log.Error("disk tier stripe stopped writing; the node serves on from memory, peers and the origin",
			"stripe", st.id, "err", err)
	}
	if st.cur != nil {
		st.evictRange(off, st.end, false)
	}
}

// syncToLocked waits until the stripe's bytes up to lsn are written and
// synced: the group commit of Sync.
func (st *stripe) syncToLocked(lsn int64) error {
	return st.flushUntilLocked(func() bool { return st.synced >= lsn })
}

// flushUntilLocked writes the buffer out, or waits for the write under
// way, until done: a committer or a reader waiting for its bytes joins the
// flush another started rather than writing again.
func (st *stripe) flushUntilLocked(done func() bool) error {
	for !done() {
		if st.failed != nil {
			return fmt.Errorf("%w: %v", errStripeStopped, st.failed)
		}
		if st.flushing {
			st.cond.Wait()
			continue
		}
		if err := st.flushLocked(); err != nil {
			return err
		}
	}
	return nil
}

// drainLocked writes out everything appended.
func (st *stripe) drainLocked() error {
	for len(st.buf) > 0 || st.flushing {
		if err := st.flushLocked(); err != nil {
			return err
		}
	}
	return nil
}

// rotateLocked seals the current segment and opens the next, rewriting
// into it the objects of a reclaimed one of its own that were read since
// they were written.
func (st *stripe) rotateLocked() error {
	for st.rotating {
		st.cond.Wait()
	}
	st.rotating = true
	defer func() {
		st.rotating = false
		st.cond.Broadcast()
	}()
	for len(st.buf) > 0 || st.flushing {
		if err := st.flushLocked(); err != nil {
			return err
		}
	}
	if st.cur != nil {
		st.d.seal(st.cur)
		st.cur = nil
		st.curIdx.Store(-1)
	}
	s, victims, err := st.d.takeSegment(st)
	if err != nil {
		if !errors.Is(err, errNoSegment) {
			st.failLocked("allocate", err, 0)
		}
		return err
	}
	st.cur = s
	st.curIdx.Store(int32(s.idx))
	start := st.d.start(s.idx)
	st.pos, st.end, st.bufStart = start, start+st.d.g.segSize, start
	st.buf = append(st.buf[:0], encodeSegHeader(st.d.g, st.id, s.seq, 0)...)
	st.pos += unit
	st.lsn += unit
	st.dirtySince = time.Now()
	st.rewriteLocked(victims)
	return nil
}

// rewriteLocked appends the rescued records at the start of the new
// segment, under the current segment seq, and points the index at them.
func (st *stripe) rewriteLocked(victims []rescue) {
	for _, v := range victims {
		rec := v.rec
		p, err := parsePrefix(rec)
		if err != nil || st.pos+int64(len(rec)) > st.end {
			continue
		}
		if int64(len(st.buf)+len(rec)) > int64(cap(st.buf)) {
			if st.flushLocked() != nil {
				return
			}
		}
		meta := rec[prefixLen : prefixLen+p.metaLen]
		p.seq = st.cur.seqNow()
		putPrefix(rec, p, meta)
		off := st.pos
		st.buf = append(st.buf, rec...)
		st.pos += int64(len(rec))
		st.lsn += int64(len(rec))
		st.imu.Lock()
		st.tab.put(newSlot(v.id, 0, off, int64(len(rec))))
		st.imu.Unlock()
		st.d.rescued.Add(1)
		st.d.dirty.Add(1)
	}
}

// rescue is a record read back from a segment being reclaimed, to be
// written again.
type rescue struct {
	id  ident
	rec []byte
}

// evicted is what evictRange did.
type evicted struct {
	evicted int
	rescued []rescue
}

// evictRange drops from the index the records at offsets lo..hi; with
// rescue, it first reads back those its plan rewrites forward.
func (st *stripe) evictRange(lo, hi int64, rescue bool) evicted {
	var out evicted
	keep, evict := st.rescuePlan(lo, hi, rescue)
	ids := make([]ident, 0, len(keep)+len(evict))
	for _, s := range evict {
		ids = append(ids, s.ident())
	}
	for _, s := range keep {
		ids = append(ids, s.ident())
		rec := make([]byte, int64(s.n)*unit)
		if _, err := st.d.f().ReadAt(rec, int64(s.off)*unit); err != nil {
			continue
		}
		out.rescued = append(out.rescued, rescueOf(s, rec))
	}
	st.imu.Lock()
	for _, id := range ids {
		if s := st.tab.find(id); s != nil {
			if off := int64(s.off) * unit; off >= lo && off < hi {
				st.tab.remove(id)
				out.evicted++
			}
		}
	}
	st.imu.Unlock()
	if len(ids) > 0 {
		st.d.dirty.Add(1)
		st.d.groups.evicted(st.id, ids)
	}
	return out
}

// rescuePlan splits the records at offsets lo..hi between those a reclaim
// rewrites forward (keep) and those it evicts. It keeps those read since
// they were written, the most asked for first, up to three quarters of a
// segment of them, so that a reclaim always frees some room. The admission
// weighs a new object against the evicted ones (victimFreqLocked): an
// object read but over the three quarters is one of them. Without rescue,
// all are evicted.
func (st *stripe) rescuePlan(lo, hi int64, rescue bool) (keep, evict []slot) {
	st.imu.RLock()
	st.tab.each(func(s *slot) bool {
		if off := int64(s.off) * unit; off >= lo && off < hi {
			if v := loadSlot(s); rescue && loadFlags(s)&slotRead != 0 && st.rescuable(&v) {
				keep = append(keep, v)
			} else {
				evict = append(evict, v)
			}
		}
		return true
	})
	st.imu.RUnlock()
	if st.d.freqOf != nil {
		slices.SortFunc(keep, func(a, b slot) int {
			return cmp.Compare(st.d.freqOf(mix(uint64(b.tag))), st.d.freqOf(mix(uint64(a.tag))))
		})
	}
	budget := st.d.g.segSize * 3 / 4
	n := 0
	for _, s := range keep {
		if size := int64(s.n) * unit; size <= budget {
			budget -= size
			keep[n] = s
			n++
		} else {
			evict = append(evict, s)
		}
	}
	return keep[:n], evict
}

// rescuable reports whether a reclaim may rewrite s's record forward: one
// no larger than the write buffer, nor half a segment.
func (st *stripe) rescuable(s *slot) bool {
	n := int64(s.n) * unit
	return n <= st.d.g.bufSize && n <= st.d.g.segSize/2
}

func rescueOf(s slot, rec []byte) rescue { return rescue{id: s.ident(), rec: rec} }

// insert points the index at a record written for key hash h; flags are
// the new slot's. It returns the slot replaced. st.mu is held.
func (st *stripe) insert(h uint64, off, n int64, flags uint32) slot {
	st.imu.Lock()
	old := st.tab.put(newSlot(identOf(h), flags, off, n))
	st.imu.Unlock()
	st.d.dirty.Add(1)
	return old
}

// lookup returns key hash h's slot and pins its segment; the caller
// unpins it.
func (st *stripe) lookup(h uint64, read bool) (slot, *segment, bool) {
	st.imu.RLock()
	s := st.tab.find(identOf(h))
	if s == nil {
		st.imu.RUnlock()
		return slot{}, nil, false
	}
	if read && loadFlags(s)&slotRead == 0 {
		setFlag(s, slotRead)
	}
	v := loadSlot(s)
	seg := st.d.segOf(int64(v.off) * unit)
	seg.pin()
	st.imu.RUnlock()
	return v, seg, true
}

// buffered copies the bytes off..off+n from the write buffers, if they are
// there; st.mu is held.
func (st *stripe) bufferedLocked(off, n int64) ([]byte, bool) {
	for _, b := range []struct {
		start int64
		buf   []byte
	}{{st.bufStart, st.buf}, {st.inflightStart, st.inflight}} {
		if len(b.buf) > 0 && off >= b.start && off+n <= b.start+int64(len(b.buf)) {
			return append([]byte(nil), b.buf[off-b.start:off-b.start+n]...), true
		}
	}
	return nil, false
}

// writtenLocked reports whether bytes up to end of the current segment
// are in the file; st.mu is held.
func (st *stripe) writtenLocked(end int64) bool {
	if st.cur == nil || end <= st.d.start(st.cur.idx) || end > st.end {
		return true // another segment: written when it was sealed
	}
	if st.flushing && end > st.inflightStart {
		return false
	}
	return len(st.buf) == 0 || end <= st.bufStart
}
