package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Coding is the content coding the store compresses bodies with.
const Coding = "zstd"

// encoders are reused: a zstd encoder is costly to build.
var encoders = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic(err) // the options are constant
	}
	return e
}}

// ErrAborted is what readers of a fill that failed get.
var ErrAborted = errors.New("store: the object's fill failed before it was complete")

// ErrNotStored is what a reader asked for after a fill that was streamed
// but not kept gets.
var ErrNotStored = errors.New("store: the object was streamed to its readers but not stored")

// Writer streams one object into the store. Readers made with NewReader
// follow it as it is written, each at its own pace, so a slow client does
// not slow the fill nor the other clients. The object becomes visible to
// Get only when Commit succeeds; Abort leaves nothing behind.
type Writer struct {
	s       *Store
	e       *Entry // the object's metadata; Size and Length final at Commit
	f       *os.File
	tmp     string
	zw      *zstd.Encoder // nil unless compressing
	crc     uint32
	length  int64 // identity bytes written
	maxSize int64
	mem     []byte // a copy of the stored body while it may fit the memory tier
	memOK   bool
	werr    error // first write error

	mu    sync.Mutex
	cond  sync.Cond
	avail int64 // stored body bytes readers may read
	done  bool
	err   error  // why the fill failed
	final *Entry // the stored object, once committed
	// onFinish runs as the fill ends, before its readers see the end.
	onFinish func()
	refs     int // the writer and its open readers; the file closes at 0
}

// Create starts storing an object with e's metadata (Key, Status, Header,
// times). sizeHint is the origin's Content-Length, or -1. compress stores
// the body zstd-coded. maxSize is the largest body stored: a longer one is
// still spooled for its readers, then discarded.
func (s *Store) Create(e *Entry, sizeHint int64, compress bool, maxSize int64) (*Writer, error) {
	coding := ""
	if compress {
		coding = Coding
	}
	return s.create(e, sizeHint, coding, compress, maxSize)
}

// create starts a record whose body has coding; encode says whether
// Write takes identity bytes to encode, or bytes already coded.
func (s *Store) create(e *Entry, sizeHint int64, coding string, encode bool, maxSize int64) (*Writer, error) {
	if err := s.disk.admit(max(sizeHint, 0)); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(s.disk.tmp, "fill-*")
	if errors.Is(err, fs.ErrNotExist) && s.disk.recreate() {
		f, err = os.CreateTemp(s.disk.tmp, "fill-*")
	}
	if err != nil {
		s.disk.warn("create", err)
		return nil, err
	}
	meta := *e
	meta.disk, meta.Body, meta.Size, meta.Length, meta.Coding = nil, nil, -1, sizeHint, coding
	head := encodeHead(&meta)
	meta.off = int64(len(head))
	if _, err := f.Write(head); err != nil {
		s.disk.warn("write", err)
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	w := &Writer{s: s, e: &meta, f: f, tmp: f.Name(), maxSize: maxSize, refs: 1,
		memOK: sizeHint <= s.memMax}
	w.cond.L = &w.mu
	if encode && coding == Coding {
		w.zw = encoders.Get().(*zstd.Encoder)
		w.zw.Reset(sink{w})
	}
	return w, nil
}

// Entry is the object's metadata, for answering readers' clients.
func (w *Writer) Entry() *Entry { return w.e }

// Write adds body bytes as the origin sent them.
func (w *Writer) Write(p []byte) (int, error) {
	if w.werr != nil {
		return 0, w.werr
	}
	w.length += int64(len(p))
	if w.zw != nil {
		if _, err := w.zw.Write(p); err != nil {
			w.werr = err
			return 0, err
		}
		return len(p), nil
	}
	return sink{w}.Write(p)
}

// sink takes stored (possibly coded) bytes: to the file, the checksum,
// the memory copy, and the readers.
type sink struct{ w *Writer }

func (s sink) Write(p []byte) (int, error) {
	w := s.w
	n, err := w.f.WriteAt(p, w.e.off+w.avail)
	w.crc = crc32.Update(w.crc, crcTable, p[:n])
	if w.memOK {
		if int64(len(w.mem)+n) <= w.s.memMax {
			w.mem = append(w.mem, p[:n]...)
		} else {
			w.mem, w.memOK = nil, false
		}
	}
	w.mu.Lock()
	w.avail += int64(n)
	w.mu.Unlock()
	w.cond.Broadcast()
	if err != nil {
		w.s.disk.warn("write", err)
		w.werr = err
	}
	return n, err
}

// Commit completes the object and makes it visible. It reports whether
// the object was stored; readers get the whole body either way, unless
// writing failed.
func (w *Writer) Commit() (stored bool, err error) {
	if w.zw != nil {
		err := w.zw.Close()
		w.zw.Reset(nil)
		encoders.Put(w.zw)
		w.zw = nil
		if err != nil && w.werr == nil {
			w.werr = err
		}
	}
	if w.werr != nil {
		w.Abort(w.werr)
		return false, w.werr
	}
	size := w.avail
	e := *w.e
	e.Size, e.Length = size, w.length
	if e.Coding == "" {
		e.Length = size
	}
	if size > w.maxSize {
		w.finish(nil)
		return false, nil
	}
	ft := footer{size: size, length: e.Length, crc: w.crc}.encode()
	if _, err := w.f.WriteAt(ft, e.off+size); err != nil {
		w.s.disk.warn("write", err)
		w.Abort(err)
		return false, err
	}
	if w.s.sync {
		if err := w.f.Sync(); err != nil {
			w.s.disk.warn("sync", err)
			w.Abort(err)
			return false, err
		}
	}
	de, err := w.s.disk.commit(w.tmp, e.Key, e.off+size+footerLen)
	if err != nil {
		if !errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrNotAdmitted) {
			w.s.disk.warn("commit", err)
		}
		w.finish(nil)
		return false, nil
	}
	e.disk = de
	if w.memOK && size <= w.s.memMax {
		e.Body = w.mem
		if e.Body == nil {
			e.Body = []byte{}
		}
		w.s.mem.Offer(&e) // the disk record serves until then
	} else {
		meta := e
		de.meta.Store(&meta)
	}
	w.mu.Lock()
	w.final = &e
	w.mu.Unlock()
	w.finish(nil)
	return true, nil
}

// Abort ends a fill that failed: nothing is stored, readers get ErrAborted.
func (w *Writer) Abort(cause error) {
	if w.zw != nil {
		w.zw.Reset(nil)
		encoders.Put(w.zw)
		w.zw = nil
	}
	w.finish(fmt.Errorf("%w: %v", ErrAborted, cause))
}

// Wait blocks until the fill is over: committed, discarded or aborted.
func (w *Writer) Wait() {
	w.mu.Lock()
	for !w.done {
		w.cond.Wait()
	}
	w.mu.Unlock()
}

// OnFinish sets f to run once as the fill ends (committed, discarded or
// aborted), after a committed object is visible and before any reader
// sees the end of the body.
func (w *Writer) OnFinish(f func()) { w.onFinish = f }

func (w *Writer) finish(err error) {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	if f := w.onFinish; f != nil {
		w.onFinish = nil
		w.mu.Unlock()
		f()
		w.mu.Lock()
	}
	w.done, w.err = true, err
	w.mu.Unlock()
	w.cond.Broadcast()
	if w.final == nil {
		os.Remove(w.tmp) // not stored; readers keep their open file
	}
	w.release()
}

func (w *Writer) release() {
	w.mu.Lock()
	w.refs--
	last := w.refs == 0
	w.mu.Unlock()
	if last {
		w.f.Close()
	}
}

// NewReader returns a reader of the stored body from its start; it blocks
// for bytes not yet written. Close it when done. Once the fill is over, the
// reader reads the stored object; ErrAborted (the fill failed) and
// ErrNotStored (it was not kept) say there is nothing left to read.
func (w *Writer) NewReader() (io.ReadCloser, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refs > 0 {
		w.refs++
		return &Reader{w: w}, nil
	}
	switch {
	case w.err != nil:
		return nil, w.err
	case w.final == nil:
		return nil, ErrNotStored
	case w.final.InMemory():
		return io.NopCloser(bytes.NewReader(w.final.Body)), nil
	}
	f, err := w.s.Open(w.final)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, w.final.Size), f}, nil
}

// Reader reads a Writer's stored body as it grows.
type Reader struct {
	w      *Writer
	off    int64
	closed bool
}

func (r *Reader) Read(p []byte) (int, error) {
	w := r.w
	w.mu.Lock()
	for r.off >= w.avail && !w.done {
		w.cond.Wait()
	}
	avail, done, err := w.avail, w.done, w.err
	w.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if r.off >= avail && done {
		return 0, io.EOF
	}
	n, rerr := w.f.ReadAt(p[:min(int64(len(p)), avail-r.off)], w.e.off+r.off)
	r.off += int64(n)
	if rerr == io.EOF {
		rerr = nil
	}
	return n, rerr
}

// Close releases the reader.
func (r *Reader) Close() error {
	if !r.closed {
		r.closed = true
		r.w.release()
	}
	return nil
}

// Put stores a whole object at once: e's metadata and body.
func (s *Store) Put(e *Entry, body []byte) error {
	w, err := s.Create(e, int64(len(body)), false, int64(len(body)))
	if err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		w.Abort(err)
		return err
	}
	if _, err := w.Commit(); err != nil {
		return err
	}
	return nil
}

// Update stores old's body, as stored (coded or not), under new metadata:
// a revalidated response's refreshed header and times. It returns the
// stored entry.
func (s *Store) Update(old *Entry, meta *Entry) (*Entry, error) {
	var src io.Reader = bytes.NewReader(old.Body)
	if !old.InMemory() {
		f, err := s.Open(old)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		src = io.LimitReader(f, old.Size)
	}
	w, err := s.create(meta, old.Size, old.Coding, false, old.Size)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(sink{w}, src); err != nil {
		w.Abort(err)
		return nil, err
	}
	w.length = old.Length
	if stored, err := w.Commit(); err != nil || !stored {
		return nil, fmt.Errorf("store: updating %s: not stored (%v)", old.Key, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.final, nil
}
