package owner

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// recordWrites keeps what is written and the size of each write.
type recordWrites struct {
	buf   bytes.Buffer
	sizes []int
}

func (w *recordWrites) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.buf.Write(p)
}

func (w *recordWrites) Bytes() []byte { return w.buf.Bytes() }

// An assembled answer whose slices are all stored leaves in writes of
// assembleChunk, however small the reads of its slices; one being filled
// goes out as it comes; a slice that breaks off is an error, not an end.
func TestCopyAssembled(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), (4*assembleChunk+1000)/16)
	record := func(src io.Reader, stored bool) (*recordWrites, int64, error) {
		w := &recordWrites{}
		n, err := copyAssembled(w, src, stored)
		return w, n, err
	}
	// A TLS record's worth a read, as a relayed slice arrives.
	w, n, err := record(&chunked{r: bytes.NewReader(body), max: 16 << 10}, true)
	if err != nil || n != int64(len(body)) || !bytes.Equal(w.Bytes(), body) {
		t.Fatalf("stored: copied %d of %d (%v), equal %v", n, len(body), err, bytes.Equal(w.Bytes(), body))
	}
	if len(w.sizes) != 5 || w.sizes[0] != assembleChunk || w.sizes[4] != len(body)-4*assembleChunk {
		t.Fatalf("stored: writes of %v, want 4 of %d and the rest", w.sizes, assembleChunk)
	}
	w, _, _ = record(&chunked{r: bytes.NewReader(body), max: 16 << 10}, false)
	if len(w.sizes) < len(body)/(32<<10) || !bytes.Equal(w.Bytes(), body) {
		t.Fatalf("being filled: %d writes, want one a read", len(w.sizes))
	}
	broken := io.MultiReader(bytes.NewReader(body[:1000]), iotest.ErrReader(io.ErrUnexpectedEOF))
	if _, n, err := record(broken, true); !errors.Is(err, io.ErrUnexpectedEOF) || n != 1000 {
		t.Fatalf("a slice that broke off: %d bytes, %v; want its 1000 bytes and the error", n, err)
	}
}

// chunked reads at most max bytes a call.
type chunked struct {
	r   io.Reader
	max int
}

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.max)]) }
