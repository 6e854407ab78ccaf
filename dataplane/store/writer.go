package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
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

// Where a fill's bytes go while it streams.
const (
	// toSpool: memory, up to spoolMax; the record is appended whole at
	// Commit.
	toSpool = iota
	// toExtent: space reserved in the data file when the fill began (its
	// length was known), written in place.
	toExtent
	// toWindow: not stored (a body of unknown length outgrew the spool, or
	// the disk failed under an extent); the bytes pass through a bounded
	// window that the slowest reader paces.
	toWindow
)

// windowMax bounds the bytes a fill that is not stored holds for readers.
const windowMax = 1 << 20

// Writer streams one object into the store. Readers made with NewReader
// follow it as it is written, each at its own pace, so a slow client does
// not slow the fill nor the other clients (except when the object cannot
// be stored: then the fill goes at its slowest reader's pace, holding at
// most a window of bytes). The object becomes visible to Get only when
// Commit succeeds; Abort leaves nothing behind.
type Writer struct {
	s       *Store
	e       *Entry // the object's metadata; Size and Length final at Commit
	h       uint64
	st      *stripe
	meta    []byte
	zw      *zstd.Encoder // nil unless compressing
	crc     uint32
	length  int64 // identity bytes written
	maxSize int64
	ext     *extent
	file    *dataFile // the data file the extent is in
	gen     int64     // and its generation
	werr    error     // first write error

	mu     sync.Mutex
	cond   sync.Cond
	mode   int
	spool  []byte // toSpool: the stored body so far (and after toWindow, its start)
	window []byte // toWindow: bytes from winBase on
	// winBase is the body offset of window[0]; bytes between the spool
	// (or extent) and it are gone.
	winBase int64
	keepTo  int64 // toWindow: bytes below it are in the spool or the extent
	avail   int64 // stored body bytes readers may read
	done    bool
	err     error  // why the fill failed
	final   *Entry // the stored object, once committed
	// onFinish runs as the fill ends, before its readers see the end.
	onFinish func()
	tooLarge bool // not kept for its size (Kept)
	// dropped: a Delete of the key came while the fill was written, so it
	// is not stored (readers still get it whole). Set under st.mu and
	// st.imu, read under either.
	dropped bool
	refs    int // the writer and its open readers
	readers map[*Reader]struct{}
}

// extent is space reserved in the data file for one fill.
type extent struct {
	seg *segment // pinned while the writer or a reader uses it
	off int64    // the record's offset
	n   int64    // the bytes reserved
}

// Create starts storing an object with e's metadata (Key, Status, Header,
// times). sizeHint is the origin's Content-Length, or -1. compress stores
// the body zstd-coded. maxSize is the largest body stored: a longer one is
// still streamed to its readers, then discarded.
func (s *Store) Create(e *Entry, sizeHint int64, compress bool, maxSize int64) (*Writer, error) {
	coding := ""
	if compress {
		coding = Coding
	}
	return s.create(e, sizeHint, coding, compress, maxSize)
}

// CreateRead is Create with a reader of the body for the fill's creator,
// from its start, taken before any byte is written: however soon the fill
// ends (a small body refused by admission), that reader gets it whole.
func (s *Store) CreateRead(e *Entry, sizeHint int64, compress bool, maxSize int64) (*Writer, io.ReadCloser, error) {
	w, err := s.Create(e, sizeHint, compress, maxSize)
	if err != nil {
		return nil, nil, err
	}
	return w, w.followLocked(), nil // w is no one else's yet
}

// followLocked is a new reader of w from the body's start, counted among
// its references; w.mu is held (or w not yet shared).
func (w *Writer) followLocked() *Reader {
	r := &Reader{w: w}
	w.refs++
	if w.readers == nil {
		w.readers = map[*Reader]struct{}{}
	}
	w.readers[r] = struct{}{}
	return r
}

// create starts a record whose body has coding; encode says whether
// Write takes identity bytes to encode, or bytes already coded.
func (s *Store) create(e *Entry, sizeHint int64, coding string, encode bool, maxSize int64) (*Writer, error) {
	d := s.disk
	if d.loading.Load() {
		return nil, ErrLoading
	}
	bound := sizeHint
	if encode && coding == Coding && sizeHint >= 0 {
		bound = sizeHint + sizeHint/128 + 1<<10 // zstd's worst case, with room
	}
	if bound > d.budget() || d.growing() && d.guard.pausedFor(max(sizeHint, 0)) {
		return nil, ErrNoSpace
	}
	meta := *e
	meta.ref, meta.Body, meta.Size, meta.Length, meta.Coding = nil, nil, -1, sizeHint, coding
	w := &Writer{s: s, e: &meta, h: keyHash(e.Key), maxSize: maxSize, refs: 1, meta: encodeMeta(&meta),
		file: d.f(), gen: d.gen.Load()}
	w.st = d.stripeOf(w.h)
	w.cond.L = &w.mu
	if n := units(prefixLen+int64(len(w.meta))+bound) * unit; sizeHint >= 0 && n > d.spoolMax() && bound <= maxSize {
		ext, err := w.st.reserve(n, w.meta)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoSpace, err)
		}
		w.ext, w.mode = ext, toExtent
	} else if w.st.stopped() {
		return nil, ErrNoSpace
	} else if sizeHint > 0 && sizeHint <= d.spoolMax() {
		w.spool = make([]byte, 0, sizeHint) // an extent's bytes go to the file, not here
	}
	if encode && coding == Coding {
		w.zw = encoders.Get().(*zstd.Encoder)
		w.zw.Reset(sink{w})
	}
	w.st.imu.Lock()
	if w.st.fills == nil {
		w.st.fills = map[uint64][]*Writer{}
	}
	w.st.fills[w.h] = append(w.st.fills[w.h], w)
	w.st.imu.Unlock()
	d.groups.listFill(w)
	return w, nil
}

// unlist takes the finished fill w off its stripe's fills and its
// group's.
func (w *Writer) unlist() {
	w.s.disk.groups.unlistFill(w)
	st := w.st
	st.imu.Lock()
	if l := slices.DeleteFunc(st.fills[w.h], func(o *Writer) bool { return o == w }); len(l) > 0 {
		st.fills[w.h] = l
	} else {
		delete(st.fills, w.h)
	}
	st.imu.Unlock()
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

// sink takes stored (possibly coded) bytes: to the spool or the extent,
// the checksum, and the readers.
type sink struct{ w *Writer }

func (s sink) Write(p []byte) (int, error) {
	w := s.w
	w.crc = crc32.Update(w.crc, crcTable, p)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.mode {
	case toSpool:
		if int64(len(w.spool)+len(p)) <= w.s.disk.spoolMax()-prefixLen-int64(len(w.meta)) {
			w.spool = append(w.spool, p...)
			break
		}
		w.toWindowLocked()
		w.windowLocked(p)
	case toExtent:
		at := w.ext.off + prefixLen + int64(len(w.meta)) + w.avail
		if w.avail+int64(len(p)) > w.ext.n-prefixLen-int64(len(w.meta)) {
			w.toWindowLocked()
			w.windowLocked(p)
			break
		}
		w.mu.Unlock()
		_, err := w.file.WriteAt(p, at)
		if err != nil && w.gen == w.s.disk.gen.Load() {
			w.st.fail("write", err) // not a data file a reset replaced
		}
		w.mu.Lock()
		if err != nil {
			w.toWindowLocked()
			w.windowLocked(p)
		}
	case toWindow:
		w.windowLocked(p)
	}
	w.avail += int64(len(p))
	w.cond.Broadcast()
	return len(p), nil
}

// toWindowLocked gives up storing the object: what follows passes through
// the window.
func (w *Writer) toWindowLocked() {
	w.mode, w.keepTo, w.winBase = toWindow, w.avail, w.avail
}

// windowLocked adds p to the window, first waiting while the slowest
// open reader is more than windowMax behind.
func (w *Writer) windowLocked(p []byte) {
	for {
		low := w.avail
		for r := range w.readers {
			low = min(low, max(r.off, w.keepTo))
		}
		if cut := low - w.winBase; cut > 0 {
			w.window = append(w.window[:0], w.window[cut:]...)
			w.winBase = low
		}
		if int64(len(w.window)) <= windowMax || len(w.readers) == 0 {
			break
		}
		w.cond.Wait()
	}
	if len(w.readers) == 0 {
		w.window, w.winBase = w.window[:0], w.avail+int64(len(p)) // nobody to hand them to
		return
	}
	w.window = append(w.window, p...)
}

// Commit completes the object and makes it visible. It reports whether
// the object was stored; readers get the whole body either way, unless
// writing failed.
func (w *Writer) Commit() (stored bool, err error) {
	// maxSize bounds the body as the origin sent it: one the store codes
	// small (a decoded bomb, a long run) is no smaller an object.
	over := w.zw != nil && w.length > w.maxSize
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
	w.mu.Lock()
	size, mode := w.avail, w.mode
	w.mu.Unlock()
	e := *w.e
	e.Size, e.Length = size, w.length
	if e.Coding == "" {
		e.Length = size
	}
	if size > w.maxSize || over || mode == toWindow {
		w.tooLarge = true
		w.finish(nil)
		return false, nil
	}
	final, err := w.s.commit(w, &e)
	if err != nil {
		if !errors.Is(err, ErrNotAdmitted) && !errors.Is(err, ErrNotStored) && !errors.Is(err, errNoSegment) && !errors.Is(err, errStripeStopped) {
			w.s.disk.warn("write", err)
		}
		w.finish(nil)
		return false, nil
	}
	w.mu.Lock()
	w.final = final
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
	w.finish(fmt.Errorf("%w: %w", ErrAborted, cause)) // the cause stays matchable (errors.Is)
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
	w.unlist()
	w.cond.Broadcast()
	w.release()
}

func (w *Writer) release() {
	w.mu.Lock()
	w.refs--
	last := w.refs == 0
	w.mu.Unlock()
	if last && w.ext != nil {
		w.ext.seg.unpin() // the extent is the record now, or dead space
	}
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
	_, err = w.Commit()
	return err
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
