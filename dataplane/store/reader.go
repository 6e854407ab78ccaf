package store

import (
	"bytes"
	"fmt"
	"io"
)

// NewReader returns a reader of the stored body from its start; it blocks
// for bytes not yet written. Close it when done. Once the fill is over, the
// reader reads the stored object; ErrAborted (the fill failed) and
// ErrNotStored (it was not kept) say there is nothing left to read.
func (w *Writer) NewReader() (io.ReadCloser, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refs > 0 && (w.mode != toWindow || w.winBase == w.keepTo) {
		return w.followLocked(), nil
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
	defer w.mu.Unlock()
	for r.off >= w.avail && !w.done {
		w.cond.Wait()
	}
	if w.err != nil {
		return 0, w.err
	}
	if r.off >= w.avail {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), w.avail-r.off)]
	var n int
	switch {
	case w.mode == toSpool || r.off < w.keepTo && w.ext == nil:
		n = copy(p, w.spool[r.off:])
	case r.off < w.keepTo || w.mode == toExtent:
		end := w.avail
		if w.mode == toWindow {
			end = w.keepTo
		}
		q := p[:min(int64(len(p)), end-r.off)]
		at := w.ext.off + prefixLen + int64(len(w.meta)) + r.off
		w.mu.Unlock()
		k, err := w.file.ReadAt(q, at)
		w.mu.Lock()
		if err != nil && k < len(q) {
			return k, fmt.Errorf("%w: reading the fill back: %v", ErrAborted, err)
		}
		n = k
	case r.off < w.winBase:
		return 0, fmt.Errorf("%w: the reader fell behind a fill that is not stored", ErrAborted)
	default:
		n = copy(p, w.window[r.off-w.winBase:])
	}
	r.off += int64(n)
	w.cond.Broadcast() // a writer waiting on the window
	return n, nil
}

// Close releases the reader.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.w.mu.Lock()
	delete(r.w.readers, r)
	r.w.mu.Unlock()
	r.w.cond.Broadcast()
	r.w.release()
	return nil
}

// Kept reports whether the fill is over (as it is once a reader has read
// its end) and, if so, whether the object was stored, and if not whether
// for its size: longer than maxSize, or of unknown length and longer than
// a fill holds. Not stored otherwise, the disk tier did not admit it (or
// the fill failed).
func (w *Writer) Kept() (over, stored, tooLarge bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done, w.final != nil, w.tooLarge
}
