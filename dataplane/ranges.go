package dataplane

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
	"time"

	"github.com/shardcache/shardcache/dataplane/store"
)

// byteRange is a satisfiable range of a representation: start and length.
type byteRange struct{ start, length int64 }

func (b byteRange) contentRange(size int64) string {
	return fmt.Sprintf("bytes %d-%d/%d", b.start, b.start+b.length-1, size)
}

// maxRanges bounds the ranges of one request; more are served as the
// whole representation, as RFC 9110 14.2 allows, rather than as hundreds
// of parts.
const maxRanges = 64

// parseRange reads a Range field (RFC 9110 14.1.2) against a
// representation of size bytes: the satisfiable ranges, in the order
// asked; errRangeInvalid for a field to ignore; errRangeUnsatisfiable when
// none overlaps.
func parseRange(field string, size int64) ([]byteRange, error) {
	unit, set, ok := strings.Cut(field, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return nil, errRangeInvalid
	}
	var out []byteRange
	specs := 0
	for spec := range strings.SplitSeq(set, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue // empty list elements are allowed (RFC 9110 5.6.1)
		}
		if specs++; specs > maxRanges {
			return nil, errRangeInvalid
		}
		first, last, ok := strings.Cut(spec, "-")
		if !ok {
			return nil, errRangeInvalid
		}
		first, last = strings.TrimSpace(first), strings.TrimSpace(last)
		if first == "" {
			// suffix-range: the last n bytes.
			n, err := digits(last)
			if err != nil {
				return nil, errRangeInvalid
			}
			if n == 0 || size == 0 {
				continue // unsatisfiable
			}
			n = min(n, size)
			out = append(out, byteRange{size - n, n})
			continue
		}
		start, err := digits(first)
		if err != nil {
			return nil, errRangeInvalid
		}
		end := size - 1
		if last != "" {
			if end, err = digits(last); err != nil || end < start {
				return nil, errRangeInvalid
			}
			end = min(end, size-1)
		}
		if start >= size {
			continue // unsatisfiable
		}
		out = append(out, byteRange{start, end - start + 1})
	}
	if specs == 0 {
		return nil, errRangeInvalid
	}
	if len(out) == 0 {
		return nil, errRangeUnsatisfiable
	}
	return out, nil
}

// digits parses 1*DIGIT, refusing signs, spaces and overflow.
func digits(s string) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errRangeInvalid
	}
	return strconv.ParseInt(s, 10, 64)
}

// ifRangeHolds evaluates If-Range (RFC 9110 13.1.5) against a stored
// response: an entity tag must match the strong ETag, a date must equal
// Last-Modified exactly. Without If-Range it holds.
func ifRangeHolds(r *http.Request, e *store.Entry) bool {
	v := strings.TrimSpace(r.Header.Get("If-Range"))
	if v == "" {
		return true
	}
	if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "W/") {
		etag := e.Header.Get("Etag")
		return !strings.HasPrefix(v, "W/") && etag != "" && !strings.HasPrefix(etag, "W/") && etag == v
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return false
	}
	lm, err := http.ParseTime(e.Header.Get("Last-Modified"))
	return err == nil && lm.Equal(t) && !t.Before(time.Unix(0, 0))
}

// rangesFor returns the ranges to answer r from e with, nil to send the
// whole response, or errRangeUnsatisfiable for a 416. Ranges are served
// from a complete stored 200 kept as the origin sent it; anything else is
// answered whole, as RFC 9110 allows.
func rangesFor(r *http.Request, e *store.Entry, streaming bool) ([]byteRange, error) {
	field := r.Header.Get("Range")
	if field == "" || streaming || e.Status != http.StatusOK || e.Coding != "" || e.Length < 0 ||
		r.Method != http.MethodGet && r.Method != http.MethodHead || !ifRangeHolds(r, e) {
		return nil, nil
	}
	ranges, err := parseRange(field, e.Length)
	if errors.Is(err, errRangeInvalid) {
		return nil, nil
	}
	return ranges, err
}

// answerRanges writes a 206 of ranges of e's body (one part, or
// multipart/byteranges), or a 416 when ranges is nil; section reads a
// range of the body. Headers from the entry and the cache are set already.
func answerRanges(w http.ResponseWriter, r *http.Request, e *store.Entry, ranges []byteRange, section func(start, length int64) io.Reader) error {
	h := w.Header()
	size := e.Length
	if len(ranges) == 0 {
		h.Del("Content-Type")
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		return nil
	}
	if len(ranges) == 1 {
		rg := ranges[0]
		h.Set("Content-Range", rg.contentRange(size))
		h.Set("Content-Length", strconv.FormatInt(rg.length, 10))
		w.WriteHeader(http.StatusPartialContent)
		if r.Method == http.MethodHead {
			return nil
		}
		_, err := io.Copy(w, section(rg.start, rg.length))
		return err
	}
	ctype := e.Header.Get("Content-Type")
	parts := func(dst io.Writer, withBodies bool, boundary string) (int64, error) {
		cw := &countingWriter{w: dst}
		mw := multipart.NewWriter(cw)
		if err := mw.SetBoundary(boundary); err != nil {
			return 0, err
		}
		for _, rg := range ranges {
			ph := textproto.MIMEHeader{"Content-Range": {rg.contentRange(size)}}
			if ctype != "" {
				ph.Set("Content-Type", ctype)
			}
			pw, err := mw.CreatePart(ph)
			if err != nil {
				return cw.n, err
			}
			if withBodies {
				if _, err := io.Copy(pw, section(rg.start, rg.length)); err != nil {
					return cw.n, err
				}
			} else {
				cw.n += rg.length
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
func (n *Node) readerAt(e *store.Entry) (io.ReaderAt, func(), error) {
	if e.InMemory() {
		return bytes.NewReader(e.Body), func() {}, nil
	}
	f, err := n.store.Open(e)
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
