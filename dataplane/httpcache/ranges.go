package httpcache

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ByteRange is a satisfiable range of a representation.
type ByteRange struct{ Start, Length int64 }

// ContentRange is the Content-Range value of b in a representation of size
// bytes.
func (b ByteRange) ContentRange(size int64) string {
	return fmt.Sprintf("bytes %d-%d/%d", b.Start, b.Start+b.Length-1, size)
}

// MaxRanges bounds the ranges of one request; more are served as the
// whole representation, as RFC 9110 14.2 allows, rather than as hundreds
// of parts.
const MaxRanges = 64

var (
	// ErrRangeInvalid: the Range field does not parse, or has too many
	// ranges; it is ignored and the whole representation sent.
	ErrRangeInvalid = errors.New("httpcache: invalid range")
	// ErrRangeUnsatisfiable: no range overlaps the representation: 416.
	ErrRangeUnsatisfiable = errors.New("httpcache: no range is satisfiable")
)

// ParseRange reads a Range field (RFC 9110 14.1.2) against a
// representation of size bytes: the satisfiable ranges, in the order
// asked; ErrRangeInvalid for a field to ignore; ErrRangeUnsatisfiable when
// none overlaps.
func ParseRange(field string, size int64) ([]ByteRange, error) {
	unit, set, ok := strings.Cut(field, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return nil, ErrRangeInvalid
	}
	var out []ByteRange
	specs := 0
	for spec := range strings.SplitSeq(set, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue // empty list elements are allowed (RFC 9110 5.6.1)
		}
		if specs++; specs > MaxRanges {
			return nil, ErrRangeInvalid
		}
		first, last, ok := strings.Cut(spec, "-")
		if !ok {
			return nil, ErrRangeInvalid
		}
		first, last = strings.TrimSpace(first), strings.TrimSpace(last)
		if first == "" {
			// suffix-range: the last n bytes.
			n, err := digits(last)
			if err != nil {
				return nil, ErrRangeInvalid
			}
			if n == 0 || size == 0 {
				continue // unsatisfiable
			}
			n = min(n, size)
			out = append(out, ByteRange{size - n, n})
			continue
		}
		start, err := digits(first)
		if err != nil {
			return nil, ErrRangeInvalid
		}
		end := size - 1
		if last != "" {
			if end, err = digits(last); err != nil || end < start {
				return nil, ErrRangeInvalid
			}
			end = min(end, size-1)
		}
		if start >= size {
			continue // unsatisfiable
		}
		out = append(out, ByteRange{start, end - start + 1})
	}
	if specs == 0 {
		return nil, ErrRangeInvalid
	}
	if len(out) == 0 {
		return nil, ErrRangeUnsatisfiable
	}
	return out, nil
}

// digits parses 1*DIGIT, refusing signs, spaces and overflow.
func digits(s string) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, ErrRangeInvalid
	}
	return strconv.ParseInt(s, 10, 64)
}

// IfRangeHolds evaluates a request's If-Range (RFC 9110 13.1.5) against a
// stored response's header: an entity tag must match the strong ETag, a
// date must equal Last-Modified exactly. Without If-Range it holds.
func IfRangeHolds(req, stored http.Header) bool {
	v := strings.TrimSpace(req.Get("If-Range"))
	if v == "" {
		return true
	}
	if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "W/") {
		etag := stored.Get("Etag")
		return !strings.HasPrefix(v, "W/") && etag != "" && !strings.HasPrefix(etag, "W/") && etag == v
	}
	t, ok := ParseDate(v)
	if !ok {
		return false
	}
	lm, ok := ParseDate(stored.Get("Last-Modified"))
	return ok && lm.Equal(t) && !t.Before(time.Unix(0, 0))
}

// ParseContentRange reads "bytes first-last/complete" (RFC 9110 14.4);
// total is -1 for "*".
func ParseContentRange(v string) (start, end, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	rng, size, found2 := strings.Cut(rest, "/")
	first, last, found3 := strings.Cut(rng, "-")
	if !found || !found2 || !found3 {
		return 0, 0, 0, false
	}
	var err error
	if start, err = digits(first); err != nil {
		return 0, 0, 0, false
	}
	if end, err = digits(last); err != nil || end < start {
		return 0, 0, 0, false
	}
	total = -1
	if size != "*" {
		if total, err = digits(size); err != nil || end >= total {
			return 0, 0, 0, false
		}
	}
	return start, end, total, true
}
