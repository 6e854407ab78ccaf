package owner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/store"
)

// rangesFor returns the ranges to answer r from e with, nil to send the
// whole response, or httpcache.ErrRangeUnsatisfiable for a 416. Ranges are
// served from a stored 200 kept as the origin sent it, of a known length;
// one still streaming in (streaming) is served one range, as its bytes
// arrive. Anything else is answered whole, as RFC 9110 allows.
func rangesFor(r *http.Request, e *store.Entry, streaming bool) ([]httpcache.ByteRange, error) {
	field := r.Header.Get("Range")
	if field == "" || streaming && strings.Contains(field, ",") || e.Status != http.StatusOK || e.Coding != "" || e.Length < 0 ||
		r.Method != http.MethodGet && r.Method != http.MethodHead || !httpcache.IfRangeHolds(r.Header, e.Header) {
		return nil, nil
	}
	ranges, err := httpcache.ParseRange(field, e.Length)
	if errors.Is(err, httpcache.ErrRangeInvalid) {
		return nil, nil
	}
	return ranges, err
}

// writeRanges writes a 206 of ranges of a stored body (one part, or
// multipart/byteranges) of a representation of size bytes with header
// stored, or a 416 when ranges is nil; section reads a range of the
// representation. Headers from the entry and the cache are set already.
func writeRanges(w http.ResponseWriter, r *http.Request, stored http.Header, size int64, ranges []httpcache.ByteRange, section func(start, length int64) io.Reader) error {
	h := w.Header()
	if len(ranges) == 0 {
		h.Del("Content-Type")
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		return nil
	}
	if len(ranges) == 1 {
		rg := ranges[0]
		h.Set("Content-Range", rg.ContentRange(size))
		h.Set("Content-Length", strconv.FormatInt(rg.Length, 10))
		w.WriteHeader(http.StatusPartialContent)
		if r.Method == http.MethodHead {
			return nil
		}
		_, err := io.Copy(w, section(rg.Start, rg.Length))
		return err
	}
	ctype := stored.Get("Content-Type")
	parts := func(dst io.Writer, withBodies bool, boundary string) (int64, error) {
		cw := &countingWriter{w: dst}
		mw := multipart.NewWriter(cw)
		if err := mw.SetBoundary(boundary); err != nil {
			return 0, err
		}
		for _, rg := range ranges {
			ph := textproto.MIMEHeader{"Content-Range": {rg.ContentRange(size)}}
			if ctype != "" {
				ph.Set("Content-Type", ctype)
			}
			pw, err := mw.CreatePart(ph)
			if err != nil {
				return cw.n, err
			}
			if withBodies {
				if _, err := io.Copy(pw, section(rg.Start, rg.Length)); err != nil {
					return cw.n, err
				}
			} else {
				cw.n += rg.Length
			}
		}
		return cw.n, mw.Close()
	}
	boundary := multipart.NewWriter(io.Discard).Boundary()
	length, _ := parts(io.Discard, false, boundary)
	h.Set("Content-Type", "multipart/byteranges; boundary="+boundary)
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	w.WriteHeader(http.StatusPartialContent)
	if r.Method == http.MethodHead {
		return nil
	}
	_, err := parts(w, true, boundary)
	return err
}

// countingWriter counts what passes through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// readerAt is e's body as a ReaderAt: in memory, or its disk record.
func (o *Owner) readerAt(e *store.Entry) (io.ReaderAt, func(), error) {
	if e.InMemory() {
		return bytes.NewReader(e.Body), func() {}, nil
	}
	f, err := o.cfg.Store.Open(e)
	if err != nil {
		return nil, nil, err
	}
	off, err := f.Seek(0, io.SeekCurrent) // Open positions the file at the body
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return io.NewSectionReader(f, off, e.Size), func() { f.Close() }, nil
}

// passedRange is the one range of r to cut from resp, a 200 that is not
// stored, of a known length and as the origin coded it; false to pass resp
// whole.
func passedRange(r *http.Request, resp *http.Response) (httpcache.ByteRange, bool) {
	field := r.Header.Get("Range")
	if field == "" || strings.Contains(field, ",") || r.Method != http.MethodGet || resp.StatusCode != http.StatusOK ||
		resp.ContentLength < 0 || resp.Header.Get("Content-Encoding") != "" || !httpcache.IfRangeHolds(r.Header, resp.Header) {
		return httpcache.ByteRange{}, false
	}
	ranges, err := httpcache.ParseRange(field, resp.ContentLength)
	if err != nil || len(ranges) != 1 {
		return httpcache.ByteRange{}, false
	}
	return ranges[0], true
}

// countingReader reports the bytes read through it to add.
type countingReader struct {
	r   io.Reader
	add func(float64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.add(float64(n))
	return n, err
}
