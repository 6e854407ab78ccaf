package store

import (
	"errors"
	"hash/crc32"
	"io"
	"os"
	"syscall"
)

// recRef is where an entry's record lies: an entry served from the memory
// tier is current only while the index still points at the same record.
type recRef struct {
	hash uint64
	off  int64  // the record's offset in the data file
	n    int64  // its length
	seq  uint64 // its segment's seq when it was written
	body int64  // the body's offset in the data file
}

// matches reports whether slot v in segment seg is this record.
func (r *recRef) matches(v slot, seg *segment) bool {
	return int64(v.off)*unit == r.off && int64(v.n)*unit == r.n && seg.seqNow() == r.seq
}

// ErrGone is returned by Open when the object left the store since Get
// returned it (evicted, replaced, deleted, or found bad).
var ErrGone = errors.New("store: the object is no longer stored")

// headRead is what a lookup reads first: enough for a record's prefix and
// typical metadata.
const headRead = 4 << 10

// readRecord reads slot v's record: prefix and metadata, and the body when
// the whole record is at most whole bytes. It checks the record against
// key (the metadata checksum, the segment seq, the key, and the body
// checksum when it reads the body).
func (d *disk) readRecord(st *stripe, key string, v slot, seg *segment, whole int64) (*Entry, error) {
	off, n := int64(v.off)*unit, int64(v.n)*unit
	want := min(n, headRead)
	if n <= whole {
		want = n
	}
	b, err := d.readAt(st, seg, off, want)
	if err != nil {
		return nil, err
	}
	p, err := parsePrefix(b)
	if err == nil && (p.kind != kindObject || p.flags&flagPending != 0 || int64(p.units)*unit != n) {
		err = badRecord(badFormat, "not an object record of %d bytes", n)
	}
	if err != nil {
		return nil, err
	}
	if seq := seg.seqNow(); p.seq != seq {
		return nil, badRecord(badLength, "record of segment seq %d in a segment of seq %d", p.seq, seq)
	}
	metaEnd := prefixLen + int64(p.metaLen)
	if metaEnd > int64(len(b)) {
		more, err := d.readAt(st, seg, off+int64(len(b)), metaEnd-int64(len(b)))
		if err != nil {
			return nil, err
		}
		b = append(b, more...)
	}
	meta := b[prefixLen:metaEnd]
	if err := checkPrefix(b, meta); err != nil {
		return nil, err
	}
	e, err := decodeMeta(meta)
	if err != nil {
		return nil, err
	}
	if e.Key != key {
		return nil, errOtherKey
	}
	e.Size, e.Length = p.size, p.length
	e.ref = &recRef{hash: keyHash(key), off: off, n: n, seq: p.seq, body: off + metaEnd}
	if int64(len(b)) >= metaEnd+p.size && n <= whole {
		body := b[metaEnd : metaEnd+p.size]
		if got := crc32.Checksum(body, crcTable); got != p.bodyCRC {
			return nil, badRecord(badChecksum, "body checksum %08x, want %08x", got, p.bodyCRC)
		}
		e.Body, e.verified = body, true
	}
	return e, nil
}

// errOtherKey: the slot's record holds another key with the same tag.
var errOtherKey = errors.New("store: the record holds another key")

// readAt reads n bytes at off of st's segment seg: from the write buffer
// when they are still there, else from the file.
func (d *disk) readAt(st *stripe, seg *segment, off, n int64) ([]byte, error) {
	if int32(seg.idx) == st.curIdx.Load() {
		st.mu.Lock()
		b, ok := st.bufferedLocked(off, n)
		st.mu.Unlock()
		if ok {
			return b, nil
		}
	}
	b := make([]byte, n)
	if _, err := d.f().ReadAt(b, off); err != nil {
		if err == io.EOF {
			return nil, badRecord(badLength, "record at %d cut short: the data file ends first", off)
		}
		d.warn("read", err)
		return nil, err
	}
	return b, nil
}

// written waits until the bytes of st's segment seg up to end are in the
// file, writing the buffer out if it holds them.
func (st *stripe) written(seg *segment, end int64) error {
	if int32(seg.idx) != st.curIdx.Load() {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.flushUntilLocked(func() bool { return st.writtenLocked(end) })
}

// verify checks the body of r against its prefix's checksum.
func (d *disk) verify(r *recRef) error {
	var pb [prefixLen]byte
	if _, err := d.f().ReadAt(pb[:], r.off); err != nil {
		return err
	}
	p, err := parsePrefix(pb[:])
	if err != nil {
		return err
	}
	h := crc32.New(crcTable)
	if _, err := io.Copy(h, io.NewSectionReader(d.f().f, r.body, p.size)); err != nil {
		d.warn("read", err)
		return err
	}
	if got := h.Sum32(); got != p.bodyCRC {
		return badRecord(badChecksum, "body checksum %08x, want %08x", got, p.bodyCRC)
	}
	return nil
}

// Body is a stored body on disk, read from its record in the data file
// through a descriptor of its own: its Read (and sendfile, through
// SyscallConn, when a plaintext HTTP/1.1 answer copies it with an
// io.LimitedReader) moves only its own file offset. Offsets of Seek and
// ReadAt are the data file's: Open leaves the Body at the body's first
// byte, and Read and ReadAt stop at its last. The record stays in place
// until Close, even if the object is evicted meanwhile.
type Body struct {
	f          *os.File
	gen        int64
	seg        *segment
	pool       *fdPool
	start, end int64
	// pos is the descriptor's offset, known while only Read moves it;
	// -1 once SyscallConn handed the descriptor out (to sendfile).
	pos    int64
	closed bool
}

var _ syscall.Conn = (*Body)(nil)

// Read reads from the Body's offset, up to the body's end.
func (b *Body) Read(p []byte) (int, error) {
	if b.pos < 0 {
		pos, err := b.f.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, err
		}
		b.pos = pos
	}
	if b.pos >= b.end {
		return 0, io.EOF
	}
	n, err := b.f.Read(p[:min(int64(len(p)), b.end-b.pos)])
	b.pos += int64(n)
	return n, err
}

// ReadAt reads at off, a data file offset inside the body.
func (b *Body) ReadAt(p []byte, off int64) (int, error) {
	if off < b.start || off >= b.end {
		return 0, io.EOF
	}
	n, err := b.f.ReadAt(p[:min(int64(len(p)), b.end-off)], off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// Seek moves the Body's offset in the data file.
func (b *Body) Seek(offset int64, whence int) (int64, error) {
	pos, err := b.f.Seek(offset, whence)
	b.pos = pos
	if err != nil {
		b.pos = -1
	}
	return pos, err
}

// SyscallConn gives sendfile the Body's descriptor.
func (b *Body) SyscallConn() (syscall.RawConn, error) {
	b.pos = -1 // sendfile moves the offset
	return b.f.SyscallConn()
}

// Close releases the Body.
func (b *Body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.seg.unpin()
	b.pool.put(b.f, b.gen)
	return nil
}
