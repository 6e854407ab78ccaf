package store

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// commit stores the finished fill w with metadata e and returns the
// stored entry: on probation, or appended to its stripe.
func (s *Store) commit(w *Writer, e *Entry) (*Entry, error) {
	if w.ext != nil {
		return s.commitExtent(w, e)
	}
	body := w.spool
	if body == nil {
		body = []byte{}
	}
	// Probation only once the tier is full: until then storing costs no
	// other object its place. An object takes at most a quarter of its
	// stripe's queue, so the queue holds a few.
	if s.probation && !s.disk.growing() && e.Size <= s.memMax && int64(len(body))+256 <= w.st.probation.max/4 && !w.st.has(w.h) &&
		s.freq.EstimateHash(freqKey(w.h)) <= 1 {
		e.Body = body
		if !s.toProbation(e, w) {
			return nil, ErrNotStored
		}
		return e, nil
	}
	return s.commitSmall(w.st, w.h, e, objRec{meta: w.meta, body: body, length: e.Length, crc: w.crc}, w)
}

// commitSmall appends record rec of e, the object of fill w, to stripe st
// and indexes it, unless a Delete dropped the fill. Without a fill it is
// promoting: it moves e from probation (if e is still there).
func (s *Store) commitSmall(st *stripe, h uint64, e *Entry, rec objRec, w *Writer) (*Entry, error) {
	n := rec.size()
	promoting := w == nil
	st.mu.Lock()
	if promoting && st.onProbation(e.Key) != e || !promoting && w.dropped {
		st.mu.Unlock()
		return nil, ErrNotStored
	}
	replacing := st.has(h)
	if !replacing && !s.admitLocked(st, h) {
		st.mu.Unlock()
		s.disk.rejected.Add(1)
		return nil, ErrNotAdmitted
	}
	off, lsn, err := st.appendFuncLocked(n, rec.put)
	if err != nil {
		st.mu.Unlock()
		return nil, err
	}
	old := st.insert(h, off, n, slotVerified)
	st.imu.Lock()
	onProb := st.probation.remove(e.Key) != nil
	st.imu.Unlock()
	if s.disk.sync {
		err = st.syncToLocked(lsn)
	}
	st.mu.Unlock()
	if err != nil {
		return nil, err // the stripe failed: what it held unwritten left the index
	}
	return s.committed(st, h, e, old, onProb, off, n, off+prefixLen+int64(len(rec.meta)), rec.body), nil
}

// commitExtent completes w's extent and indexes it through a marker.
func (s *Store) commitExtent(w *Writer, e *Entry) (*Entry, error) {
	st, ext := w.st, w.ext
	p := prefix{kind: kindObject, flags: flagExtent, seq: ext.seg.seqNow(), units: uint32(ext.n / unit),
		size: e.Size, length: e.Length, bodyCRC: w.crc}
	var pb [prefixLen]byte
	putPrefix(pb[:], p, w.meta)
	st.mu.Lock()
	defer st.mu.Unlock()
	if w.gen != s.disk.gen.Load() || w.dropped {
		return nil, ErrNotStored // its data file was removed meanwhile, or its key deleted
	}
	// A reclaim through a newer segment of the stripe takes an older one
	// even while a fill writes in it (its pin keeps it from reuse, not
	// from the reclaim): indexed, the fill would replace the key's older
	// version at once and leave it to come back after a restart.
	s.disk.poolMu.Lock()
	reclaimed := ext.seg.state == segFree
	s.disk.poolMu.Unlock()
	if reclaimed {
		return nil, ErrNotStored
	}
	replacing := st.has(w.h)
	if !replacing && !s.admitLocked(st, w.h) {
		s.disk.rejected.Add(1)
		return nil, ErrNotAdmitted
	}
	if _, err := w.file.WriteAt(pb[:], ext.off); err != nil {
		return nil, fmt.Errorf("completing an extent: %w", err)
	}
	if ext.seg.run > 0 && (st.cur == nil || st.cur.seqNow() < p.seq) {
		// The marker goes to a segment newer than the run, so that no
		// reclaim takes the marker and leaves the run: the order of a
		// stripe's segments is the order of its objects' versions.
		if err := st.rotateLocked(); err != nil {
			return nil, err
		}
	}
	ref := &extentRef{off: ext.off, units: uint32(ext.n / unit), seq: p.seq}
	_, lsn, err := st.appendLocked(smallRecord(kindMarker, 0, w.h, ref))
	if err != nil {
		return nil, err
	}
	old := st.insert(w.h, ext.off, ext.n, slotVerified)
	st.imu.Lock()
	onProb := st.probation.remove(e.Key) != nil
	st.imu.Unlock()
	if s.disk.sync {
		if err := st.syncToLocked(lsn); err != nil {
			return nil, err
		}
	}
	return s.committed(st, w.h, e, old, onProb, ext.off, ext.n, ext.off+prefixLen+int64(len(w.meta)), nil), nil
}

// committed finishes a commit: counts, groups, the memory tier.
func (s *Store) committed(st *stripe, h uint64, e *Entry, old slot, onProb bool, off, n, bodyOff int64, body []byte) *Entry {
	s.disk.admitted.Add(1)
	id := identOf(h)
	if old.tag != 0 {
		s.disk.groups.evicted(st.id, []ident{id})
	}
	s.disk.groups.join(e.Key, onDisk, st.id, id)
	if onProb {
		s.disk.groups.leave(e.Key, inProbation)
	}
	stored := *e
	stored.ref = &recRef{hash: h, off: off, n: n, seq: s.disk.segOf(off).seqNow(), body: bodyOff}
	stored.verified = true
	stored.Body = nil
	// The memory tier may hold the replaced version: drop it before the
	// new one is offered, so no Get finds the old one after this.
	s.mem.Delete(e.Key)
	if body != nil && e.Size <= s.memMax {
		stored.Body = body
		s.mem.Offer(&stored)
	}
	return &stored
}

// has reports whether the index holds key hash h.
func (st *stripe) has(h uint64) bool {
	st.imu.RLock()
	defer st.imu.RUnlock()
	return st.tab.find(identOf(h)) != nil
}

// freqKey is what the admission sketch counts for key hash h: derived from
// the slot's tag alone, so a victim known only by its slot is counted too.
func freqKey(h uint64) uint64 { return mix(uint64(tagOf(h))) }

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// admitLocked applies TinyLFU's admission (Einziger et al.) once the tier
// is full: a new object is stored only if it is asked for more often than
// the objects the next reclaim of its stripe would evict: those of the
// stripe's oldest segment that it would not rewrite forward (not read since
// written), the most asked for of all of them or of a sample of 8, counted
// again every second. So a scan of objects asked for once passes through
// a full tier without evicting what its clients keep asking for. A tie
// is refused, as in TinyLFU: admitted, it would trade one object for
// another asked for as often at the cost of a write, and shorten the
// time every object has to be read before its segment is reclaimed (on
// S2s's workload, 14 % more disk writes and a third more rewrites for
// the same hit ratio). Counts halve every period, so a tie does not hold
// an object out for long. st.mu is held.
func (s *Store) admitLocked(st *stripe, h uint64) bool {
	if s.freq == nil || s.disk.growing() {
		return true
	}
	return s.freq.EstimateHash(freqKey(h)) > st.victimFreqLocked(s.freq.EstimateHash)
}

// victimSet is what a stripe's next reclaim would evict, found again when
// its oldest segment changes, or after a second: the highest count among
// (a sample of) its objects.
type victimSet struct {
	idx  int
	seq  uint64
	at   time.Time
	freq uint32
}

// victimFreqLocked returns the highest count, by estimate, among (up to 8
// of) the objects of st's oldest segment that its reclaim would not
// rewrite. st.mu is held.
func (st *stripe) victimFreqLocked(estimate func(uint64) uint32) uint32 {
	d := st.d
	d.poolMu.Lock()
	oldest := -1
	if o := d.owned[st.id]; len(o) > 0 {
		oldest = o[0]
	}
	d.poolMu.Unlock()
	if oldest < 0 {
		return 0
	}
	seq, v := d.segs[oldest].seqNow(), &st.victimCache
	if v.idx == oldest && v.seq == seq && time.Since(v.at) < time.Second {
		return v.freq
	}
	_, evict := st.rescuePlan(d.start(oldest), d.start(oldest+max(1, d.segs[oldest].run)), true)
	v.idx, v.seq, v.at, v.freq = oldest, seq, time.Now(), 0
	for i := range min(len(evict), 8) {
		t := evict[i].tag
		if len(evict) > 8 {
			t = evict[rand.IntN(len(evict))].tag
		}
		v.freq = max(v.freq, estimate(mix(uint64(t))))
	}
	return v.freq
}

// reserve makes room for a fill of n bytes (its record, padding included)
// and writes its provisional head there: prefix and metadata, marked
// pending, so that a replay skips it until its marker says it is done.
func (st *stripe) reserve(n int64, meta []byte) (*extent, error) {
	st.mu.Lock()
	ext, err := st.reserveLocked(n)
	st.mu.Unlock()
	if err != nil {
		return nil, err
	}
	head := make([]byte, prefixLen+len(meta))
	copy(head[prefixLen:], meta)
	putPrefix(head, prefix{kind: kindObject, flags: flagExtent | flagPending, seq: ext.seg.seqNow(), units: uint32(n / unit)}, meta)
	if _, err := st.d.f().WriteAt(head, ext.off); err != nil {
		ext.seg.unpin()
		st.d.warn("write", err)
		return nil, err
	}
	return ext, nil
}

func (st *stripe) reserveLocked(n int64) (*extent, error) {
	d := st.d
	if n > d.g.segSize-unit {
		k := int((n + unit + d.g.segSize - 1) / d.g.segSize)
		head, err := d.takeRun(st, k)
		if err != nil {
			return nil, err
		}
		head.pin()
		if _, err := d.f().WriteAt(encodeSegHeader(d.g, st.id, head.seqNow(), k), d.start(head.idx)); err != nil {
			head.unpin()
			return nil, err
		}
		return &extent{seg: head, off: d.start(head.idx) + unit, n: n}, nil
	}
	for {
		switch {
		case st.failed != nil:
			return nil, fmt.Errorf("%w: %v", errStripeStopped, st.failed)
		case st.rotating:
			st.cond.Wait()
		case st.cur == nil || st.pos+n > st.end:
			if err := st.rotateLocked(); err != nil {
				return nil, err
			}
		case len(st.buf) > 0 || st.flushing:
			if err := st.flushLocked(); err != nil {
				return nil, err
			}
		default:
			off := st.pos
			st.pos += n
			st.bufStart = st.pos
			st.cur.pin()
			return &extent{seg: st.cur, off: off, n: n}, nil
		}
	}
}

// stopped reports whether a disk error stopped the stripe's writes.
func (st *stripe) stopped() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.failed != nil
}

// budget is the data file's whole size.
func (d *disk) budget() int64 { return int64(d.g.nseg) * d.g.segSize }

// growing reports whether some segment was never used: the file may grow.
func (d *disk) growing() bool { return !d.allUsed.Load() }

// keyOf reads the key of slot v's record.
func (d *disk) keyOf(st *stripe, v slot) (string, bool) {
	seg := d.segOf(int64(v.off) * unit)
	b, err := d.readAt(st, seg, int64(v.off)*unit, min(int64(v.n)*unit, headRead))
	if err != nil {
		return "", false
	}
	p, err := parsePrefix(b)
	if err != nil || prefixLen+int64(p.metaLen) > int64(len(b)) {
		return "", false
	}
	var dec decoder
	dec.b = b[prefixLen : prefixLen+p.metaLen]
	k := dec.string()
	return k, !dec.err
}
