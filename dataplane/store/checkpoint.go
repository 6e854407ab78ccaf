package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// The checkpoint is the index saved to a file of its own, so that a start
// reads one file instead of every segment:
//
//	"SHIX" | version u32 | segment bytes u64 | segments u32 | stripes u32
//	per stripe: current segment i32 | write offset u64 | seq u64
//	            segments held u32, each: index u32 | seq u64 | run u32
//	            slots u64, each: tag u32 | flags u32 | offset u32 | units u32
//	            grouped keys u32, each: slot ident u64 | key length u32 | key
//	CRC-32C u32 of everything before it
//
// Each stripe's buffer is written and the data file synced before the
// checkpoint is taken, so what it points at is on disk. A start then
// trusts a segment only if its header still has the seq the checkpoint
// saw, and replays what follows the current segment's write offset and
// every segment the stripe opened since (seq above the one noted with the
// offset), whether the checkpoint saw it or not.
const (
	ckptName    = "index"
	ckptMagic   = "SHIX"
	ckptVersion = 3
)

// ckptStripe is one stripe's part of a checkpoint.
type ckptStripe struct {
	cur     int32
	pos     int64
	after   uint64 // segments of a greater seq were opened after pos was read
	owned   []ckptSeg
	slots   []slot
	grouped map[ident]string
}

type ckptSeg struct {
	idx int
	seq uint64
	run int
}

// checkpoint saves the index. It runs alone (the maintenance loop, or
// Close after it stopped).
func (d *disk) checkpoint() error {
	d.dirty.Store(0)
	parts := make([]ckptStripe, len(d.stripes))
	for i, st := range d.stripes {
		st.mu.Lock()
		if err := st.drainLocked(); err != nil && st.failed == nil {
			st.mu.Unlock()
			return err
		}
		parts[i].cur, parts[i].pos = -1, st.pos
		if st.cur != nil {
			parts[i].cur, parts[i].after = int32(st.cur.idx), st.cur.seqNow()
		} else {
			d.poolMu.Lock()
			parts[i].after = d.seq
			d.poolMu.Unlock()
		}
		st.mu.Unlock()
	}
	if err := d.f().Sync(); err != nil {
		return fmt.Errorf("syncing the data file: %w", err)
	}
	d.poolMu.Lock()
	for i := range parts {
		for _, idx := range d.owned[i] {
			s := d.segs[idx]
			parts[i].owned = append(parts[i].owned, ckptSeg{idx: idx, seq: s.seqNow(), run: s.run})
		}
	}
	d.poolMu.Unlock()
	for i, st := range d.stripes {
		st.imu.RLock()
		parts[i].slots = make([]slot, 0, st.tab.n)
		st.tab.each(func(v *slot) bool {
			c := *v
			c.flags = loadFlags(v) & hashBits // flags: checked again after a restart
			parts[i].slots = append(parts[i].slots, c)
			return true
		})
		st.imu.RUnlock()
	}
	for i, m := range d.groups.onDiskKeys() {
		parts[i].grouped = m
	}
	return d.writeCheckpoint(parts)
}

func (d *disk) writeCheckpoint(parts []ckptStripe) error {
	tmp := filepath.Join(d.dir, ckptName+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer f.Close()
	crc := crc32.New(crcTable)
	w := bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)
	var b []byte
	b = append(b, ckptMagic...)
	b = binary.LittleEndian.AppendUint32(b, ckptVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(d.g.segSize))
	b = binary.LittleEndian.AppendUint32(b, uint32(d.g.nseg))
	b = binary.LittleEndian.AppendUint32(b, uint32(d.g.nstripes))
	w.Write(b)
	for _, p := range parts {
		b = binary.LittleEndian.AppendUint32(b[:0], uint32(p.cur))
		b = binary.LittleEndian.AppendUint64(b, uint64(p.pos))
		b = binary.LittleEndian.AppendUint64(b, p.after)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p.owned)))
		for _, s := range p.owned {
			b = binary.LittleEndian.AppendUint32(b, uint32(s.idx))
			b = binary.LittleEndian.AppendUint64(b, s.seq)
			b = binary.LittleEndian.AppendUint32(b, uint32(s.run))
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(len(p.slots)))
		w.Write(b)
		for _, v := range p.slots {
			b = binary.LittleEndian.AppendUint32(b[:0], v.tag)
			b = binary.LittleEndian.AppendUint32(b, v.flags)
			b = binary.LittleEndian.AppendUint32(b, v.off)
			b = binary.LittleEndian.AppendUint32(b, v.n)
			w.Write(b)
		}
		b = binary.LittleEndian.AppendUint32(b[:0], uint32(len(p.grouped)))
		for id, k := range p.grouped {
			b = binary.LittleEndian.AppendUint64(b, uint64(id))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(k)))
			b = append(b, k...)
		}
		w.Write(b)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if _, err := f.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, ckptName)); err != nil {
		return err
	}
	if dir, err := os.Open(d.dir); err == nil {
		dir.Sync()
		dir.Close()
	}
	return nil
}

var errCheckpoint = errors.New("store: index checkpoint unusable")

// readCheckpoint reads the checkpoint; os.ErrNotExist if there is none.
func (d *disk) readCheckpoint() ([]ckptStripe, error) {
	b, err := os.ReadFile(filepath.Join(d.dir, ckptName))
	if err != nil {
		return nil, err
	}
	if len(b) < 28 || crc32.Checksum(b[:len(b)-4], crcTable) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum does not match", errCheckpoint)
	}
	r := ckptReader{b: b[:len(b)-4]}
	if string(r.bytes(4)) != ckptMagic || r.u32() != ckptVersion {
		return nil, fmt.Errorf("%w: not a checkpoint of this version", errCheckpoint)
	}
	if int64(r.u64()) != d.g.segSize || int(r.u32()) != d.g.nseg || int(r.u32()) != d.g.nstripes {
		return nil, errGeometry
	}
	parts := make([]ckptStripe, d.g.nstripes)
	for i := range parts {
		p := &parts[i]
		p.cur, p.pos, p.after = int32(r.u32()), int64(r.u64()), r.u64()
		for n := r.count(uint64(r.u32()), 16); n > 0; n-- {
			p.owned = append(p.owned, ckptSeg{idx: int(r.u32()), seq: r.u64(), run: int(r.u32())})
		}
		p.slots = make([]slot, r.count(r.u64(), 16))
		for j := range p.slots {
			p.slots[j] = slot{tag: r.u32(), flags: r.u32(), off: r.u32(), n: r.u32()}
		}
		p.grouped = map[ident]string{}
		for n := r.count(uint64(r.u32()), 12); n > 0; n-- {
			id := ident(r.u64())
			p.grouped[id] = string(r.bytes(int(r.u32())))
		}
	}
	if r.bad || len(r.b) != 0 {
		return nil, fmt.Errorf("%w: it does not parse", errCheckpoint)
	}
	return parts, nil
}

// ckptReader reads a checkpoint's fields, noting the first short read.
type ckptReader struct {
	b   []byte
	bad bool
}

func (r *ckptReader) bytes(n int) []byte {
	if n < 0 || n > len(r.b) {
		r.bad, r.b = true, nil
		return make([]byte, max(n, 0))
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *ckptReader) u32() uint32 { return binary.LittleEndian.Uint32(r.bytes(4)) }
func (r *ckptReader) u64() uint64 { return binary.LittleEndian.Uint64(r.bytes(8)) }

// count checks a count of items of at least each bytes against what the
// rest of the file can hold.
func (r *ckptReader) count(n uint64, each int) int {
	if n > uint64(len(r.b)/each) {
		r.bad, r.b = true, nil
		return 0
	}
	return int(n)
}
