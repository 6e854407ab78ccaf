package reply

import (
	"errors"
	"io"
	"sync"
)

// CopyBuffer is the size of the buffers Copy and Buffer lend.
const CopyBuffer = 32 << 10

var buffers = sync.Pool{New: func() any { return new([CopyBuffer]byte) }}

// Copy is io.Copy with a buffer of a shared pool: a body copied between
// two parts that neither reads from nor writes to the other (a fill into
// the store, an answer to a writer without ReadFrom) costs no new 32 KiB
// each. Where src or dst takes the other itself (sendfile), no buffer is
// used at all, as with io.Copy.
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	b := buffers.Get().(*[CopyBuffer]byte)
	defer buffers.Put(b)
	return io.CopyBuffer(dst, src, b[:])
}

// Buffer lends a buffer of CopyBuffer bytes; give it back with Return once
// nothing refers to it.
func Buffer() *[CopyBuffer]byte { return buffers.Get().(*[CopyBuffer]byte) }

// Return gives back a buffer Buffer lent.
func Return(b *[CopyBuffer]byte) { buffers.Put(b) }

// ErrNotAtEnd says a body went on past where it was to end.
var ErrNotAtEnd = errors.New("reply: the body goes on past its end")

// ReadEnd reads r, whose wanted bytes are read, on to its end (into
// scratch, at least a byte): nil when it ends there, else ErrNotAtEnd or
// the reader's error. A body read to its end is one whose sender has
// finished: a keep-alive connection goes back to its pool, a fill has
// been stored.
func ReadEnd(r io.Reader, scratch []byte) error {
	for {
		n, err := r.Read(scratch)
		switch {
		case n > 0:
			return ErrNotAtEnd
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}
