package store

import (
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// The index holds one 16-byte slot per object in an open-addressing table
// (linear probing, backward-shift deletion, grown at 3/4 full): between
// 21 and 43 bytes per object with the table's free slots, and no key.
// A lookup that finds no slot is a miss that reads nothing from disk. A
// slot holds 56 bits of the key's 64-bit hash; the record on disk holds
// the whole key, checked on every read, so two keys sharing those bits
// (one pair in about 10^5 stripes of a million keys) cost a miss, never a
// wrong answer.

// slot is one object in the index.
type slot struct {
	tag uint32 // top 32 bits of the key hash; 0: an empty slot
	// flags holds bits 8 to 31 of the key hash in its high 24 bits and the
	// slot's flags in its low 8; read and set atomically under the
	// stripe's read lock. With tag, 56 bits of the hash tell keys apart.
	flags uint32
	off   uint32 // the record's offset in the data file, in units
	n     uint32 // the record's length, in units
}

// Slot flags.
const (
	// slotRead is set when the object is read; a reclaim rewrites forward
	// an object read since it was written.
	slotRead = 1
	// slotVerified is set once the body's checksum has been checked, or
	// the body was written by this process.
	slotVerified = 2
)

// keyHash is the hash the index and the records use: stable across
// restarts (a checkpoint holds it).
func keyHash(key string) uint64 { return xxhash.Sum64String(key) }

// ident is what tells a key's slot from another's: tag and the hash bits
// of flags.
type ident uint64

const hashBits = 0xFFFFFF00

func identOf(h uint64) ident { return ident(uint64(tagOf(h))<<32 | uint64(uint32(h)&hashBits)) }

func (s *slot) ident() ident {
	return ident(uint64(s.tag)<<32 | uint64(atomic.LoadUint32(&s.flags)&hashBits))
}

// newSlot is the slot of key hash h's record of n bytes at off.
func newSlot(id ident, flags uint32, off, n int64) slot {
	return slot{tag: uint32(id >> 32), flags: uint32(id)&hashBits | flags&^hashBits, off: uint32(off / unit), n: uint32(n / unit)}
}

func tagOf(h uint64) uint32 {
	t := uint32(h >> 32)
	if t == 0 {
		t = 1
	}
	return t
}

// table is a stripe's index; the stripe's lock guards it.
type table struct {
	slots []slot
	n     int
	used  int64 // bytes of the records indexed
}

const minTable = 64

func (t *table) mask() uint32 { return uint32(len(t.slots) - 1) }

func (t *table) home(tag uint32) uint32 {
	// The tag's high bits pick the bucket; tags are already hashed.
	return (tag * 2654435769) & t.mask()
}

// find returns the slot of id, or nil.
func (t *table) find(id ident) *slot {
	if len(t.slots) == 0 {
		return nil
	}
	tag := uint32(id >> 32)
	for i := t.home(tag); ; i = (i + 1) & t.mask() {
		s := &t.slots[i]
		switch {
		case s.tag == 0:
			return nil
		case s.tag == tag && s.ident() == id:
			return s
		}
	}
}

// put sets v's slot (by its ident) and returns the slot it replaced (tag
// 0 if none).
func (t *table) put(v slot) slot {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	id := v.ident()
	for i := t.home(v.tag); ; i = (i + 1) & t.mask() {
		s := &t.slots[i]
		switch {
		case s.tag == v.tag && s.ident() == id:
			old := *s
			*s = v
			t.used += int64(v.n)*unit - int64(old.n)*unit
			return old
		case s.tag == 0:
			*s = v
			t.n++
			t.used += int64(v.n) * unit
			return slot{}
		}
	}
}

// remove deletes id's slot and returns it (tag 0 if none).
func (t *table) remove(id ident) slot {
	if len(t.slots) == 0 {
		return slot{}
	}
	m := t.mask()
	tag := uint32(id >> 32)
	i := t.home(tag)
	for ; t.slots[i].tag != tag || t.slots[i].ident() != id; i = (i + 1) & m {
		if t.slots[i].tag == 0 {
			return slot{}
		}
	}
	old := t.slots[i]
	// Backward shift: move later slots of the run into the hole when
	// their home is not between the hole and them.
	for j := (i + 1) & m; t.slots[j].tag != 0; j = (j + 1) & m {
		h := t.home(t.slots[j].tag)
		if (j-h)&m >= (j-i)&m {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
	t.used -= int64(old.n) * unit
	if len(t.slots) > minTable && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
	return old
}

func (t *table) grow() { t.resize(max(minTable, 2*len(t.slots))) }

func (t *table) resize(n int) {
	old := t.slots
	t.slots, t.n, t.used = make([]slot, n), 0, 0
	for _, s := range old {
		if s.tag != 0 {
			t.put(s)
		}
	}
}

// each calls fn with every slot until fn returns false; fn may change the
// slot's fields but not remove it.
func (t *table) each(fn func(s *slot) bool) {
	for i := range t.slots {
		if t.slots[i].tag != 0 && !fn(&t.slots[i]) {
			return
		}
	}
}

// bytes is the table's memory.
func (t *table) bytes() int64 { return int64(len(t.slots)) * 16 }

func loadFlags(s *slot) uint32 { return atomic.LoadUint32(&s.flags) }

// loadSlot copies s, its flags read atomically: readers under the
// stripe's read lock may be setting them meanwhile.
func loadSlot(s *slot) slot       { return slot{tag: s.tag, flags: loadFlags(s), off: s.off, n: s.n} }
func setFlag(s *slot, f uint32)   { atomic.OrUint32(&s.flags, f) }
func clearFlag(s *slot, f uint32) { atomic.AndUint32(&s.flags, ^f) }
