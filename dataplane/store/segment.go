package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync/atomic"
)

// The disk tier's budget is one data file of nseg segments. A segment is
// written by one stripe, in sequence, through the stripe's write buffer;
// it starts with a header of one unit naming its stripe and its seq (one
// counter for the whole tier, so a segment reused holds a new seq). A
// stripe reclaims its own oldest segment whole when it holds its share;
// below its share it takes a never used one, else the oldest of a stripe
// over its share. An object larger than a segment takes a run of adjacent
// segments, whose first header says how many.

// segment states.
const (
	segFree   = iota // holds nothing indexed
	segOpen          // a stripe's current segment
	segSealed        // full, or left at a restart
	segRun           // the first segment of a run (an extent over several)
	segInRun         // the rest of a run
)

// geometry is the layout of the data file, derived from the budget.
type geometry struct {
	segSize  int64 // bytes, a multiple of unit
	base     int64 // the power of two segSize has room for with a record's head
	nseg     int
	nstripes int
	bufSize  int64 // a stripe's write buffer; records up to it are buffered
}

const (
	minSegment = 32 << 10
	maxSegment = 64 << 20
	maxBuffer  = 4 << 20
)

func geometryFor(budget int64) (geometry, error) {
	// A segment is a power of two (about a 64th of the budget) and room for
	// a record's head (a 64th more, at least 8 KiB): an object of a
	// power-of-two size, as a policy's slices are, fits in one with its
	// head, where a segment of exactly its size would make it take two.
	base := int64(minSegment)
	for base*2 <= min(budget/64, maxSegment) {
		base *= 2
	}
	seg := base + max(base/64, 8<<10)/unit*unit
	if budget/seg < 8 {
		seg = base
	}
	g := geometry{segSize: seg, base: base, nseg: int(budget / seg)}
	if g.nseg < 8 {
		return g, fmt.Errorf("store: disk budget %d bytes; it must be at least %d", budget, 8*minSegment)
	}
	if budget/unit >= 1<<32 {
		return g, fmt.Errorf("store: disk budget %d bytes; it must be under 2 TiB", budget)
	}
	g.nstripes = 1
	for g.nstripes < 4 && g.nseg/(2*g.nstripes) >= 8 {
		g.nstripes *= 2
	}
	g.bufSize = min(maxBuffer, max(seg/16, min(64<<10, seg/2))) / unit * unit
	return g, nil
}

// segment is one segment's state; the pool's lock guards all but pins.
type segment struct {
	idx   int
	state int
	owner int    // the stripe writing or holding it
	seq   uint64 // of its header; 0 before its first use; atomic

	run  int  // segments in the run, on its first segment
	used bool // allocated in the file at least once
	// pins counts readers and fills using its bytes: it is not reclaimed
	// while pinned.
	pins atomic.Int32
}

func (s *segment) pin() { s.pins.Add(1) }

// seqNow reads seq without the pool's lock.
func (s *segment) seqNow() uint64 { return atomic.LoadUint64(&s.seq) }

func (s *segment) setSeq(v uint64) { atomic.StoreUint64(&s.seq, v) }
func (s *segment) unpin()          { s.pins.Add(-1) }

// Segment header: "SHSG" | version u16 | stripe u16 | seq u64 | run u32 |
// segment units u32 | segments u32 | stripes u16 | CRC-32C u32.
const (
	segMagic   = "SHSG"
	segVersion = 1
	segHdrLen  = 36
)

func encodeSegHeader(g geometry, stripe int, seq uint64, run int) []byte {
	b := make([]byte, unit)
	copy(b, segMagic)
	binary.LittleEndian.PutUint16(b[4:], segVersion)
	binary.LittleEndian.PutUint16(b[6:], uint16(stripe))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(run))
	binary.LittleEndian.PutUint32(b[20:], uint32(g.segSize/unit))
	binary.LittleEndian.PutUint32(b[24:], uint32(g.nseg))
	binary.LittleEndian.PutUint16(b[28:], uint16(g.nstripes))
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], crcTable))
	return b
}

// segHeader is a parsed segment header.
type segHeader struct {
	stripe int
	seq    uint64
	run    int
}

var errNoHeader = errors.New("store: no segment header")

// decodeSegHeader parses a header written under geometry g; a header of
// another geometry is an error of its own (errGeometry).
func decodeSegHeader(g geometry, b []byte) (segHeader, error) {
	if len(b) < segHdrLen || string(b[:4]) != segMagic ||
		crc32.Checksum(b[:32], crcTable) != binary.LittleEndian.Uint32(b[32:]) {
		return segHeader{}, errNoHeader
	}
	if binary.LittleEndian.Uint16(b[4:]) != segVersion || int64(binary.LittleEndian.Uint32(b[20:]))*unit != g.segSize ||
		int(binary.LittleEndian.Uint32(b[24:])) != g.nseg || int(binary.LittleEndian.Uint16(b[28:])) != g.nstripes {
		return segHeader{}, errGeometry
	}
	h := segHeader{stripe: int(binary.LittleEndian.Uint16(b[6:])), seq: binary.LittleEndian.Uint64(b[8:]),
		run: int(binary.LittleEndian.Uint32(b[16:]))}
	if h.stripe >= g.nstripes || h.seq == 0 || h.run < 0 {
		return segHeader{}, errNoHeader
	}
	return h, nil
}

var errGeometry = errors.New("store: the data file was laid out for another disk budget")

// start is the segment's first byte in the data file.
func (d *disk) start(idx int) int64 { return int64(idx) * d.g.segSize }

// segOf is the segment holding byte off of the data file.
func (d *disk) segOf(off int64) *segment { return d.segs[off/d.g.segSize] }

// errNoSegment: every segment is in use, pinned or being written.
var errNoSegment = errors.New("store: no segment free to write: all are pinned by readers or fills")

// takeSegment finds the next segment for stripe st, empties it and opens
// it as st's current segment under a new seq, all under the pool's lock:
// no other stripe (nor a run) can take the same segment meanwhile. The
// victims are the objects of st's own oldest segment read since they were
// written, to rewrite forward. st.mu is held.
func (d *disk) takeSegment(st *stripe) (seg *segment, victims []rescue, err error) {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	defer func() {
		if seg != nil {
			d.openLocked(st, seg)
		}
	}()
	if s, err := d.freeLocked(); s != nil || err != nil {
		return s, nil, err
	}
	share := d.g.nseg / d.g.nstripes
	for _, from := range d.reclaimOrderLocked(st, share) {
		for tries := 0; tries < len(d.segs); tries++ {
			i := slices.IndexFunc(d.owned[from], func(idx int) bool {
				s := d.segs[idx]
				return s.state != segOpen && s.state != segFree && s.pins.Load() == 0
			})
			if i < 0 || d.segs[d.owned[from][i]].state == segOpen {
				break
			}
			s := d.segs[d.owned[from][i]]
			v := d.reclaimThroughLocked(from, s.idx, from == st.id)
			if s.pins.Load() != 0 {
				continue // a reader pinned it meanwhile: it is freed once they are done
			}
			if err := d.syncReclaimLocked(); err != nil {
				return nil, nil, err
			}
			return s, v, nil
		}
	}
	return nil, nil, errNoSegment
}

// reclaimThroughLocked reclaims stripe from's segments oldest first up to
// and including segment idx. A stripe's segments on disk stay the newest
// of those it wrote: an older one left valid would bring back, at a
// rebuild, objects that a reclaimed newer one had replaced or deleted.
//
// The segment the stripe is writing stays: reclaimed, it would go on
// taking the stripe's appends, under a cleared header or, once another
// stripe reopened it, under that stripe's seq and over its records, and
// what either committed there would be lost or torn at the next start.
// Only runs whose fills have not committed follow it (a committed run's
// marker goes to a segment newer than the run), so keeping it brings back
// no object that a run reclaimed here replaced.
func (d *disk) reclaimThroughLocked(from, idx int, keep bool) []rescue {
	owned := d.owned[from]
	n := slices.Index(owned, idx) + 1
	var out []rescue
	left := owned[:0:0]
	for _, j := range owned[:n] {
		if d.segs[j].state == segOpen {
			left = append(left, j)
			continue
		}
		out = append(out, d.reclaimLocked(d.segs[j], keep)...)
	}
	// Those still pinned by readers are reused once they are done.
	d.owned[from] = append(left, owned[n:]...)
	return out
}

// syncReclaimLocked makes the reclaims' header writes durable before the
// segment is written again, with Sync.
func (d *disk) syncReclaimLocked() error {
	if !d.sync {
		return nil
	}
	return d.f().Sync()
}

// reclaimOrderLocked lists the stripes to take a segment from: st itself
// when it holds its share, else those over their share, most first.
func (d *disk) reclaimOrderLocked(st *stripe, share int) []int {
	if d.heldLocked(st.id) >= share {
		return []int{st.id}
	}
	var order []int
	for i := range d.owned {
		if i != st.id && d.heldLocked(i) > share {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		for i := range d.owned {
			order = append(order, (st.id+i)%len(d.owned))
		}
	}
	return order
}

// heldLocked is how many segments stripe i holds, its runs included.
func (d *disk) heldLocked(i int) int {
	n := 0
	for _, idx := range d.owned[i] {
		n += max(1, d.segs[idx].run)
	}
	return n
}

// freeLocked returns a segment that holds nothing: one reclaimed before,
// else one never used, if the free-space guard lets the file grow.
func (d *disk) freeLocked() (*segment, error) {
	var fresh *segment
	allUsed := true
	for _, s := range d.segs {
		if !s.used {
			allUsed = false
		}
		if s.state != segFree || s.pins.Load() != 0 {
			continue
		}
		if s.used {
			return s, nil
		}
		if fresh == nil {
			fresh = s
		}
	}
	d.allUsed.Store(allUsed)
	if fresh == nil || d.guard.pausedFor(d.g.segSize) {
		return nil, nil
	}
	if err := d.allocate(fresh); err != nil {
		return nil, err
	}
	return fresh, nil
}

// allocate gives s its space in the file.
func (d *disk) allocate(s *segment) error {
	if err := d.f().Allocate(d.start(s.idx), d.g.segSize); err != nil {
		return fmt.Errorf("allocating segment %d: %w", s.idx, err)
	}
	s.used = true
	return nil
}

// reclaimLocked empties s (and its run): its objects leave the index (the
// ones read since written, with rescue, are returned to be rewritten) and
// its header is cleared, so that neither a checkpoint nor a rebuild trusts
// its records again.
func (d *disk) reclaimLocked(s *segment, rescue bool) []rescue {
	lo, hi := d.start(s.idx), d.start(s.idx+max(1, s.run))
	victims := d.stripes[s.owner].evictRange(lo, hi, rescue)
	d.evicted.Add(uint64(victims.evicted))
	if s.used {
		if _, err := d.f().WriteAt(make([]byte, unit), lo); err != nil {
			d.warn("write", err, "segment", s.idx)
		}
	}
	for i := range max(1, s.run) {
		p := d.segs[s.idx+i]
		p.state, p.run = segFree, 0
	}
	return victims.rescued
}

// takeRun finds n adjacent segments for one large object of stripe st,
// empties them and makes them a run. st.mu is held.
func (d *disk) takeRun(st *stripe, n int) (*segment, error) {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	if n > len(d.segs) {
		return nil, errNoSegment
	}
	first := d.emptyRunLocked(n)
	if first < 0 {
		first = d.cursorRunLocked(n)
	}
	if first < 0 {
		return nil, errNoSegment
	}
	for i := range n {
		s := d.segs[first+i]
		if s.state == segInRun {
			s = d.runHead(s.idx)
		}
		if s.state != segFree && s.state != segInRun {
			d.reclaimThroughLocked(s.owner, s.idx, false)
		}
	}
	if err := d.syncReclaimLocked(); err != nil {
		return nil, err
	}
	for i := range n {
		if s := d.segs[first+i]; !s.used {
			if err := d.allocate(s); err != nil {
				return nil, err
			}
		}
	}
	head := d.segs[first]
	for i := range n {
		d.segs[first+i].state, d.segs[first+i].owner = segInRun, st.id
	}
	head.state, head.run = segRun, n
	d.seq++
	head.setSeq(d.seq)
	d.owned[st.id] = append(d.owned[st.id], head.idx)
	return head, nil
}

// cursorRunLocked finds, from the run cursor on, n adjacent segments that
// may become a run (runFreeLocked), whatever they hold; -1 when none.
func (d *disk) cursorRunLocked(n int) int {
	for range len(d.segs) {
		first := d.runCursor
		if first+n > len(d.segs) {
			first = 0
		}
		d.runCursor = first + n
		if d.runFreeLocked(first, n) {
			return first
		}
		d.runCursor = first + 1
	}
	return -1
}

// emptyRunLocked finds n adjacent segments that hold nothing (reclaimed,
// or never used while the file may grow): a run taken there evicts no
// object. -1 when there are none; the run cursor then takes the oldest.
func (d *disk) emptyRunLocked(n int) int {
	k := 0
	for i, s := range d.segs {
		if s.state == segFree && s.pins.Load() == 0 && d.mayUse(s) {
			k++
		} else {
			k = 0
		}
		if k == n {
			return i - n + 1
		}
	}
	return -1
}

// mayUse reports whether s may be written: used before, or the free-space
// guard lets the file grow into it.
func (d *disk) mayUse(s *segment) bool { return s.used || !d.guard.pausedFor(d.g.segSize) }

// runFreeLocked reports whether segments first..first+n-1 may become a
// run: none open or pinned, nor part of a run that is.
func (d *disk) runFreeLocked(first, n int) bool {
	for i := range n {
		s := d.segs[first+i]
		if s.state == segInRun {
			if s = d.runHead(s.idx); s == nil {
				return false
			}
		}
		if s.state == segOpen || s.pins.Load() != 0 {
			return false
		}
		if !d.mayUse(s) {
			return false
		}
	}
	return true
}

// openLocked makes s stripe st's current segment under a new seq.
// d.poolMu is held.
func (d *disk) openLocked(st *stripe, s *segment) {
	d.seq++
	s.setSeq(d.seq)
	s.state, s.owner, s.run = segOpen, st.id, 0
	d.owned[st.id] = append(d.owned[st.id], s.idx)
}

// seal marks st's current segment full.
func (d *disk) seal(s *segment) {
	d.poolMu.Lock()
	s.state = segSealed
	d.poolMu.Unlock()
}
