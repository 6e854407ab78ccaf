package reply

import (
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
