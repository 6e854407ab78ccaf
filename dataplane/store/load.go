package store

import (
	"cmp"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// load rebuilds the index at start: from the checkpoint, checked against
// the segment headers, then the records written since it (the current
// segments' tails, and the segments opened since) replayed in order;
// without a checkpoint, from every segment. A record that does not check
// out ends its segment's replay there: a torn tail is dropped.
func (d *disk) load(stop <-chan struct{}) {
	start := time.Now()
	hdrs, size := d.readHeaders()
	parts, err := d.readCheckpoint()
	switch {
	case errors.Is(err, errGeometry) || errors.Is(hdrs.err, errGeometry):
		d.log.Warn("disk tier: the data file was laid out for another disk budget; discarding what it holds", "dir", d.dir)
		d.f().f.Truncate(0)
		os.Remove(filepath.Join(d.dir, ckptName))
		hdrs, size, parts = segHeaders{}, 0, nil
	case errors.Is(err, fs.ErrNotExist):
		parts = nil
	case err != nil:
		d.log.Warn("disk tier: index checkpoint unusable; rebuilding the index from the segments", "err", err)
		parts = nil
	}
	for i, s := range d.segs {
		s.used = d.start(i)+d.g.segSize <= size
		if h, ok := hdrs.at[i]; ok {
			s.setSeq(h.seq)
			d.seq = max(d.seq, h.seq)
		}
	}
	trusted := d.applyCheckpoint(parts, hdrs)
	after := make([]uint64, len(d.stripes)) // per stripe: replay the segments opened after it
	for i, p := range parts {
		after[i] = p.after
	}
	var replay []int
	for i, h := range hdrs.at {
		if !trusted[i] || parts != nil && h.seq > after[h.stripe] && int32(i) != parts[h.stripe].cur {
			replay = append(replay, i)
			d.segs[i].owner = h.stripe
		}
	}
	slices.SortFunc(replay, func(a, b int) int { return cmp.Compare(hdrs.at[a].seq, hdrs.at[b].seq) })
	tails := map[int]int64{} // segment → where its replay ended
	for i, p := range parts {
		if p.cur >= 0 && trusted[int(p.cur)] {
			tails[int(p.cur)] = d.replay(d.stripes[i], d.segs[p.cur], p.pos, stop)
		}
	}
	for _, idx := range replay {
		s, h := d.segs[idx], hdrs.at[idx]
		st := d.stripes[h.stripe]
		if !trusted[idx] {
			d.owned[h.stripe] = append(d.owned[h.stripe], idx)
		}
		if h.run > 0 {
			d.markRun(s, h.run, h.stripe)
			continue
		}
		s.state = segSealed
		tails[idx] = d.replay(st, s, d.start(idx)+unit, stop)
	}
	for i := range d.owned { // oldest first, whether the checkpoint saw them or not
		slices.SortFunc(d.owned[i], func(a, b int) int { return cmp.Compare(d.segs[a].seqNow(), d.segs[b].seqNow()) })
	}
	d.resume(tails)
	all := true
	for _, s := range d.segs {
		all = all && s.used
	}
	d.allUsed.Store(all)
	bytes, objects := int64(0), 0
	for _, st := range d.stripes {
		bytes += st.tab.used
		objects += st.tab.n
	}
	d.log.Info("disk tier index loaded", "objects", objects, "bytes", bytes, "from_checkpoint", parts != nil,
		"segments_replayed", len(replay), "took", time.Since(start).Round(time.Millisecond))
}

// segHeaders are the headers found at start, by segment.
type segHeaders struct {
	at  map[int]segHeader
	err error // errGeometry if a header was written for another budget
}

// readHeaders reads every segment's header, and the data file's size.
func (d *disk) readHeaders() (segHeaders, int64) {
	out := segHeaders{at: map[int]segHeader{}}
	fi, err := d.f().f.Stat()
	if err != nil {
		d.warn("load", err)
		return out, 0
	}
	b := make([]byte, segHdrLen)
	for i := range d.segs {
		if d.start(i)+unit > fi.Size() {
			break
		}
		if _, err := d.f().ReadAt(b, d.start(i)); err != nil {
			continue
		}
		h, err := decodeSegHeader(d.g, b)
		if errors.Is(err, errGeometry) {
			out.err = err
			return out, fi.Size()
		}
		if err == nil {
			out.at[i] = h
		}
	}
	// Segments inside a run hold body bytes where a header would be.
	for i, h := range out.at {
		for j := i + 1; j < i+h.run && j < len(d.segs); j++ {
			delete(out.at, j)
		}
	}
	return out, fi.Size()
}

// applyCheckpoint loads the checkpoint's slots into the index, keeping
// those of segments whose header still has the seq it saw, and returns
// which segments it vouches for.
func (d *disk) applyCheckpoint(parts []ckptStripe, hdrs segHeaders) map[int]bool {
	trusted := map[int]bool{}
	for i, p := range parts {
		st := d.stripes[i]
		for _, cs := range p.owned {
			h, ok := hdrs.at[cs.idx]
			if !ok || h.seq != cs.seq || h.stripe != i || h.run != cs.run || trusted[cs.idx] {
				continue
			}
			trusted[cs.idx] = true
			d.owned[i] = append(d.owned[i], cs.idx)
			s := d.segs[cs.idx]
			s.owner, s.state = i, segSealed
			if cs.run > 0 {
				d.markRun(s, cs.run, i)
			}
		}
		for _, v := range p.slots {
			off := int64(v.off) * unit
			if v.tag == 0 || off >= d.budget() {
				continue
			}
			s := d.segOf(off)
			head := s
			if s.state == segInRun {
				head = d.runHead(s.idx)
			}
			if head == nil || !trusted[head.idx] || head.owner != i {
				continue
			}
			if int32(s.idx) == p.cur && off >= p.pos {
				continue // not written when the checkpoint was taken
			}
			st.tab.put(v)
			d.loaded.Add(1)
		}
		for t, k := range p.grouped {
			if st.tab.find(t) != nil {
				d.groups.join(k, onDisk, i, t)
			}
		}
	}
	return trusted
}

// markRun makes s the head of a run of n segments of stripe st.
func (d *disk) markRun(s *segment, n, st int) {
	for j := range n {
		if s.idx+j < len(d.segs) {
			p := d.segs[s.idx+j]
			p.state, p.owner = segInRun, st
		}
	}
	s.state, s.run = segRun, n
}

// runHead finds the run that segment idx is inside.
func (d *disk) runHead(idx int) *segment {
	for i := idx; i >= 0; i-- {
		if s := d.segs[i]; s.state == segRun {
			if i+s.run > idx {
				return s
			}
			return nil
		}
	}
	return nil
}

// resume makes each stripe's newest segment its current one again,
// writing on where its replay ended.
func (d *disk) resume(tails map[int]int64) {
	for i, st := range d.stripes {
		var newest *segment
		for _, idx := range d.owned[i] {
			s := d.segs[idx]
			if s.state == segSealed && (newest == nil || s.seqNow() > newest.seqNow()) {
				newest = s
			}
		}
		end, ok := int64(0), false
		if newest != nil {
			end, ok = tails[newest.idx]
		}
		if !ok || end+unit > d.start(newest.idx)+d.g.segSize {
			continue // full, or left by the checkpoint: the next write opens a new one
		}
		newest.state = segOpen
		st.cur, st.pos, st.bufStart, st.end = newest, end, end, d.start(newest.idx)+d.g.segSize
		st.curIdx.Store(int32(newest.idx))
	}
}

// replay reads the records of st's segment s from off on, applying each
// to the index in order, and returns where the valid records end.
func (d *disk) replay(st *stripe, s *segment, off int64, stop <-chan struct{}) int64 {
	end := d.start(s.idx) + d.g.segSize
	var r segReader
	r.init(d, off, end)
	for off < end {
		select {
		case <-stop:
			return off
		default:
		}
		b, ok := r.at(off, prefixLen)
		if !ok {
			return off
		}
		p, err := parsePrefix(b)
		n := int64(p.units) * unit
		if err != nil || p.seq != s.seqNow() || n == 0 || off+n > end {
			return off
		}
		if p.flags&flagExtent != 0 {
			off += n // indexed at its marker
			continue
		}
		rec, ok := r.at(off, n)
		if !ok || d.apply(st, off, p, rec) != nil {
			return off
		}
		off += n
	}
	return off
}

// apply indexes one replayed record (checked here, body included).
func (d *disk) apply(st *stripe, off int64, p prefix, rec []byte) error {
	metaEnd := prefixLen + int(p.metaLen)
	meta := rec[prefixLen:metaEnd]
	if err := checkPrefix(rec, meta); err != nil {
		return err
	}
	switch p.kind {
	case kindObject:
		if crc32.Checksum(rec[metaEnd:int64(metaEnd)+p.size], crcTable) != p.bodyCRC {
			return badRecord(badChecksum, "body checksum")
		}
		var dec decoder
		dec.b = meta
		key := dec.string()
		if dec.err {
			return badRecord(badFormat, "no key")
		}
		h := keyHash(key)
		st.tab.put(newSlot(identOf(h), slotVerified, off, int64(p.units)*unit))
		d.groups.join(key, onDisk, st.id, identOf(h))
	case kindTombstone:
		h, _, err := parseSmall(p.kind, meta)
		if err != nil {
			return err
		}
		if old := st.tab.remove(identOf(h)); old.tag != 0 {
			d.groups.evicted(st.id, []ident{identOf(h)})
		}
	case kindMarker:
		h, ext, err := parseSmall(p.kind, meta)
		if err != nil {
			return err
		}
		if key, ok := d.checkExtent(ext, h); ok {
			st.tab.put(newSlot(identOf(h), 0, ext.off, int64(ext.units)*unit))
			d.groups.join(key, onDisk, st.id, identOf(h))
		}
	}
	d.loaded.Add(1)
	return nil
}

// checkExtent reads the head of the extent a marker names and checks it is
// that object, complete, of its segment's current seq.
func (d *disk) checkExtent(ext extentRef, h uint64) (string, bool) {
	if ext.off < 0 || ext.off >= d.budget() || d.segOf(ext.off).seqNow() != ext.seq {
		return "", false
	}
	b := make([]byte, headRead)
	n, _ := d.f().ReadAt(b, ext.off)
	p, err := parsePrefix(b[:n])
	if err != nil || p.flags&flagPending != 0 || p.flags&flagExtent == 0 || p.units != ext.units || p.seq != ext.seq ||
		prefixLen+int(p.metaLen) > n || checkPrefix(b, b[prefixLen:prefixLen+p.metaLen]) != nil {
		return "", false
	}
	var dec decoder
	dec.b = b[prefixLen : prefixLen+p.metaLen]
	key := dec.string()
	return key, !dec.err && keyHash(key) == h
}

// segReader reads a segment in large pieces for a replay.
type segReader struct {
	d          *disk
	buf        []byte
	start, end int64 // buf holds start..start+len(buf); end bounds reads
}

func (r *segReader) init(d *disk, off, end int64) { r.d, r.start, r.end = d, off, end }

// at returns n bytes at off, reading ahead up to 1 MiB.
func (r *segReader) at(off, n int64) ([]byte, bool) {
	if off >= r.start && off+n <= r.start+int64(len(r.buf)) {
		return r.buf[off-r.start : off-r.start+n], true
	}
	size := min(max(n, 1<<20), r.end-off)
	if size < n {
		return nil, false
	}
	if int64(cap(r.buf)) < size {
		r.buf = make([]byte, size)
	}
	r.buf = r.buf[:size]
	k, _ := r.d.f().ReadAt(r.buf, off)
	r.buf, r.start = r.buf[:k], off
	if int64(k) < n {
		return nil, false
	}
	return r.buf[:n], true
}

// oldLayout is the folder of the file-per-object layout of earlier
// versions, beside the data file.
const oldLayout = "objects"

// discardOldLayout moves a data directory in the file-per-object layout
// aside, saying so: its records are not read (objects are fetched again as
// they are asked for). It returns the folders to remove, which may take a
// while; removeAll does that in the background.
func (d *disk) discardOldLayout() []string {
	old := filepath.Join(d.dir, oldLayout)
	var out []string
	if _, err := os.Stat(old); err == nil {
		d.log.Warn("disk tier: found a data directory in the old file-per-object layout; discarding it, its objects are fetched again as they are asked for",
			"dir", old)
		aside := old + ".discarded"
		if err := os.Rename(old, aside); err != nil {
			d.warn("load", err, "dir", old)
		}
		out = append(out, aside, filepath.Join(d.dir, "tmp"))
	}
	if _, err := os.Stat(filepath.Join(d.dir, oldLayout+".discarded")); err == nil && len(out) == 0 {
		out = append(out, filepath.Join(d.dir, oldLayout+".discarded")) // a removal a stop cut short
	}
	return out
}

// removeAll removes the folders, one subfolder at a time, until stop.
func (d *disk) removeAll(dirs []string, stop <-chan struct{}) {
	for _, dir := range dirs {
		subs, _ := os.ReadDir(dir)
		for _, s := range subs {
			select {
			case <-stop:
				return
			default:
			}
			os.RemoveAll(filepath.Join(dir, s.Name()))
		}
		if err := os.RemoveAll(dir); err != nil {
			d.warn("load", err, "dir", dir)
		}
	}
}
