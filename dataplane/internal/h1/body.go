package h1

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// A request body is read from the connection's buffer and then the
// connection, by its Content-Length or its chunks, never past its end.
// Whatever the handler leaves unread is read and dropped after its answer,
// up to maxDiscard; a larger rest closes the connection instead.

// maxDiscard is how much of an unread body is read to keep the connection
// (net/http's figure).
const maxDiscard = 256 << 10

// Bounds of a chunked body's framing: a chunk-size line (with its
// extensions) and the trailer section.
const (
	maxChunkLine   = 4 << 10
	maxTrailerSize = 16 << 10
)

var (
	errLineTooLong = errors.New("h1: a chunk-size or trailer line is too long")
	errBadChunk    = errors.New("h1: the chunked request body is malformed")
	errTrailer     = errors.New("h1: the request's trailer section is too large")
)

// body is a request's body. The handler may read it from another
// goroutine (a transport sending it on): its state is guarded.
type body struct {
	mu      sync.Mutex
	c       *conn
	chunked bool
	// left is what is left of the body, or of the current chunk.
	left int64
	// crlf: a chunk's data has been read and its CRLF has not.
	crlf   bool
	expect bool // 100 Continue is sent before the first read
	sent   bool // it was
	eof    bool
	done   bool // the handler returned
	err    error
}

// Read reads the body.
func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

// Close ends the handler's reading; the rest is dropped after the answer.
func (b *body) Close() error { return nil }

func (b *body) read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.expect && !b.sent {
		b.sent = true
		if !b.c.resp.sendContinue() {
			b.err = errors.New("h1: the answer was sent before the body was asked for")
			return 0, b.err
		}
	}
	if b.chunked && b.left == 0 {
		if err := b.nextChunk(); err != nil {
			b.err = err
			return 0, err
		}
		if b.eof {
			return 0, io.EOF
		}
	}
	if !b.chunked && b.left == 0 {
		b.eof = true
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.read(p)
	b.left -= int64(n)
	if b.chunked && b.left == 0 {
		b.crlf = true
	}
	if err == io.EOF || n == 0 && err == nil {
		err = io.ErrUnexpectedEOF // the connection ended inside the body
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// nextChunk reads a chunk-size line (after the previous chunk's CRLF),
// or, for the last chunk, the trailer section, which is dropped.
func (b *body) nextChunk() error {
	if b.crlf {
		line, err := b.c.readLine(maxChunkLine)
		if err != nil {
			return err
		}
		if len(line) != 0 {
			return errBadChunk
		}
		b.crlf = false
	}
	line, err := b.c.readLine(maxChunkLine)
	if err != nil {
		return err
	}
	size, ok := chunkSize(line)
	if !ok {
		return errBadChunk
	}
	if size > 0 {
		b.left = size
		return nil
	}
	for total := 0; ; {
		line, err := b.c.readLine(maxChunkLine)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			b.eof = true
			return nil
		}
		if total += len(line); total > maxTrailerSize {
			return errTrailer
		}
	}
}

// chunkSize reads a chunk-size line: hex digits, then nothing or
// extensions after a semicolon (whitespace allowed before it).
func chunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto rest
		}
		if n > (1<<59)-1 {
			return 0, false // past what a body can be
		}
		n = n<<4 | int64(d)
	}
rest:
	if i == 0 {
		return 0, false
	}
	for j := i; j < len(line); j++ {
		switch line[j] {
		case ' ', '\t':
			continue
		case ';':
			return n, true
		}
		return 0, false
	}
	return n, true
}

// finish ends the body once the handler returned: true when the
// connection can read its next request after it.
func (b *body) finish() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.expect && !b.sent {
		// The client waits for a 100 Continue it will not get: it may
		// send the body or not, so nothing after can be read as a
		// request.
		b.done = true
		return false
	}
	b.c.nc.SetReadDeadline(time.Now().Add(b.c.srv.cfg.HeaderTimeout))
	var scratch [4 << 10]byte
	for total := 0; b.err == nil && !b.eof; {
		n, _ := b.read(scratch[:])
		if total += n; total > maxDiscard {
			break
		}
	}
	b.done = true
	return b.eof && b.err == nil
}
