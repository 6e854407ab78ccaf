package store

import "hash/crc32"

// probation is a stripe's new objects, held in memory until their second
// use: a FIFO bounded in bytes, whose oldest objects are dropped, never
// written, when it is full. So an object asked for once never costs a
// disk write. The stripe's imu guards it.
type probation struct {
	m          map[string]*Entry
	q          []*Entry
	head       int
	bytes, max int64
}

// add holds e, replacing key's object if held, and returns what fell out.
func (p *probation) add(e *Entry) (dropped []*Entry) {
	if p.m == nil {
		p.m = map[string]*Entry{}
	}
	if old := p.m[e.Key]; old != nil {
		p.bytes -= old.Cost()
	}
	p.m[e.Key] = e
	p.q = append(p.q, e)
	p.bytes += e.Cost()
	for p.bytes > p.max && p.head < len(p.q) {
		o := p.q[p.head]
		p.q[p.head] = nil
		p.head++
		if p.m[o.Key] == o {
			delete(p.m, o.Key)
			p.bytes -= o.Cost()
			dropped = append(dropped, o)
		}
	}
	if p.head > 64 && p.head*2 > len(p.q) {
		p.q = append(p.q[:0], p.q[p.head:]...)
		p.head = 0
	}
	return dropped
}

func (p *probation) get(key string) *Entry { return p.m[key] }

// remove drops key's object, returning it (nil if none).
func (p *probation) remove(key string) *Entry {
	e := p.m[key]
	if e != nil {
		delete(p.m, key)
		p.bytes -= e.Cost()
	}
	return e
}

func (p *probation) keys() []string {
	out := make([]string, 0, len(p.m))
	for k := range p.m {
		out = append(out, k)
	}
	return out
}

func (p *probation) all() []*Entry {
	out := make([]*Entry, 0, len(p.m))
	for _, e := range p.m {
		out = append(out, e)
	}
	return out
}

// onProbation returns key's object on probation, or nil.
func (st *stripe) onProbation(key string) *Entry {
	st.imu.RLock()
	defer st.imu.RUnlock()
	if len(st.probation.m) == 0 {
		return nil
	}
	return st.probation.get(key)
}

// toProbation holds e, the object of fill w, in memory until its second
// use, unless a Delete dropped the fill.
func (s *Store) toProbation(e *Entry, w *Writer) bool {
	st := w.st
	st.imu.Lock()
	if w.dropped {
		st.imu.Unlock()
		return false
	}
	dropped := st.probation.add(e)
	st.imu.Unlock()
	s.disk.groups.join(e.Key, inProbation, st.id, 0)
	for _, o := range dropped {
		s.disk.groups.leave(o.Key, inProbation)
	}
	return true
}

// promoter writes to disk the objects on probation used a second time.
func (s *Store) promoter() {
	for {
		select {
		case <-s.stop:
			return
		case e := <-s.promote:
			s.promoteOne(e)
		}
	}
}

// promoteOne writes e, on probation, to disk, if it is still there.
func (s *Store) promoteOne(e *Entry) {
	h := keyHash(e.Key)
	st := s.disk.stripeOf(h)
	if st.onProbation(e.Key) != e {
		return
	}
	rec := objRec{meta: encodeMeta(e), body: e.Body, length: e.Length, crc: crc32.Checksum(e.Body, crcTable)}
	if _, err := s.commitSmall(st, h, e, rec, nil); err != nil {
		return // it stays on probation until it falls out
	}
}
