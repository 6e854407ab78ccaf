// Package slice is the wire format of sliced objects and the assembler
// that reads an object from its slices, given a function that fetches one.
//
// Under a policy with a slice size, an object is fetched from the
// origin and stored as fixed-size slices: slice i holds bytes [i*size,
// (i+1)*size) and is stored under its own key (the object's key, Sep,
// the size and i), so each slice has its own owner on the ring and no node
// stores or relays a whole large object.
//
// The node a client reaches assembles the answer. It asks slice 0's owner
// for the head (slice 0: the object's header, total size and version),
// then streams the slices the answer covers in order, asking their owners
// a few slices ahead so that their origin fetches run in parallel. An owner
// fills a slice with a Range request conditional (If-Range) on the version
// the head named; an origin that has changed the object answers with the
// new version, the owner refuses it (412), and the assembling node drops
// the head and aborts, so no answer ever mixes two versions.
package slice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/sdk/policy"
)

// ErrChanged: the origin's object is no longer the version the head named.
var ErrChanged = errors.New("slice: the object changed at the origin between slices")

const (
	// Sep separates an object's key from its slice's size and index.
	Sep = "\x1fslice\x1f"
	// Window is how many slices an answer asks for ahead of the one it
	// is sending. Memory stays bounded by the peer hop's flow control:
	// each slice asked ahead holds at most one HTTP/2 stream window.
	Window = 4
)

// Req names one slice of an object.
type Req struct {
	Index, Size int64
	// version is the object version the slice must belong to; "" for the
	// head, which decides it.
	Version string
}

// Start is the offset of the slice's first byte.
func (s *Req) Start() int64 { return s.Index * s.Size }

// Last is the offset of the slice's last byte in an object of total bytes.
func (s *Req) Last(total int64) int64 { return min(s.Start()+s.Size, total) - 1 }

// Key is the slice's cache key.
func (s *Req) Key(object string) string {
	return object + Sep + strconv.FormatInt(s.Size, 10) + ":" + strconv.FormatInt(s.Index, 10)
}

// SetHeader marks a peer request as asking for s.
func (s *Req) SetHeader(h http.Header) {
	h.Set(hop.SliceField, strconv.FormatInt(s.Index, 10)+"/"+strconv.FormatInt(s.Size, 10))
	if s.Version != "" {
		h.Set(hop.SliceVersionField, s.Version)
	} else {
		h.Del(hop.SliceVersionField)
	}
}

// ParseHeader reads the slice a peer request asks for; nil when it
// asks for a whole object.
func ParseHeader(h http.Header) (*Req, error) {
	v := h.Get(hop.SliceField)
	if v == "" {
		return nil, nil
	}
	i, sz, ok := strings.Cut(v, "/")
	index, err1 := strconv.ParseInt(i, 10, 64)
	size, err2 := strconv.ParseInt(sz, 10, 64)
	if !ok || err1 != nil || err2 != nil || index < 0 || size < policy.MinSliceSize || index > math.MaxInt64/size {
		return nil, fmt.Errorf("bad %s %q: want <index>/<size>, size at least %d", hop.SliceField, v, policy.MinSliceSize)
	}
	return &Req{Index: index, Size: size, Version: h.Get(hop.SliceVersionField)}, nil
}

// OriginHeader is what a slice's origin request adds: its byte range,
// conditional on the object's version, of the unencoded representation.
func (s *Req) OriginHeader() http.Header {
	h := http.Header{
		"Range":           {fmt.Sprintf("bytes=%d-%d", s.Start(), s.Start()+s.Size-1)},
		"Accept-Encoding": {"identity"},
	}
	if s.Version != "" {
		h.Set("If-Range", s.Version)
	}
	return h
}

// FromOrigin turns the origin's answer to s's Range request into the slice
// to store, in place: a 206 of exactly the slice's bytes, with the total
// size in its Content-Range. An origin that ignores Range (200) is read up
// to the slice and cut to it. The head may also be any other answer (an
// error, a redirect, an object of unknown length), which is then the
// object's answer as a whole. ErrChanged means the origin sent
// another version than s asked for.
func (s *Req) FromOrigin(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, end, total, ok := httpcache.ParseContentRange(resp.Header.Get("Content-Range"))
		if !ok || total < 0 || start != s.Start() || end != s.Last(total) {
			return fmt.Errorf("slice %d: origin answered range %q, want bytes %d-%d", s.Index, resp.Header.Get("Content-Range"), s.Start(), s.Start()+s.Size-1)
		}
		if s.Version != "" && Version(resp.Header) != s.Version {
			return ErrChanged
		}
		resp.ContentLength = end - start + 1
		resp.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		return nil
	case http.StatusOK:
		if s.Version != "" && Version(resp.Header) != s.Version {
			return ErrChanged // If-Range failed: the whole new version came
		}
		total := resp.ContentLength
		if total < 0 {
			if s.Index == 0 {
				return nil // unknown length: kept whole, or passed on
			}
			return fmt.Errorf("slice %d: origin ignores Range and sends no length", s.Index)
		}
		if total == 0 && s.Index == 0 {
			return nil // an empty object is kept whole
		}
		if s.Start() >= total {
			return fmt.Errorf("slice %d: starts past the object's %d bytes", s.Index, total)
		}
		if _, err := io.CopyN(io.Discard, resp.Body, s.Start()); err != nil {
			return fmt.Errorf("slice %d: origin body broke off before the slice: %w", s.Index, err)
		}
		length := min(s.Size, total-s.Start())
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, length), resp.Body}
		resp.StatusCode, resp.ContentLength = http.StatusPartialContent, length
		resp.Header.Set("Content-Range", httpcache.ByteRange{Start: s.Start(), Length: length}.ContentRange(total))
		resp.Header.Set("Content-Length", strconv.FormatInt(length, 10))
		return nil
	}
	if s.Index == 0 && resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && resp.Header.Get("Content-Range") == "bytes */0" {
		// An empty object has no first slice: it is kept whole, as a 200.
		resp.Body.Close()
		resp.Body, resp.StatusCode, resp.ContentLength = http.NoBody, http.StatusOK, 0
		resp.Header.Del("Content-Range")
		resp.Header.Set("Content-Length", "0")
		return nil
	}
	if s.Index == 0 {
		return nil
	}
	return fmt.Errorf("slice %d: origin answered %d", s.Index, resp.StatusCode)
}

// Storable reports whether a slice with header h may be stored: it may
// vary by content coding (slices are fetched unencoded, so one slice
// serves every client) but by nothing else.
func Storable(h http.Header) bool {
	fields := httpcache.VaryFields(h)
	if len(fields) > 0 && !slices.Equal(fields, []string{"accept-encoding"}) {
		return false
	}
	h.Del("Vary") // a marker-less varying entry would not be looked up
	return true
}

// Version is the validator that ties an object's slices together: its
// strong ETag, else its Last-Modified when that is strong (a second or more
// before the answer's Date, RFC 9110 8.8.2.2); "" when it has neither. A
// Last-Modified of the answer's own second may name two versions written
// in that second: slices asked If-Range it would be mixed from both.
func Version(h http.Header) string {
	if et := h.Get("Etag"); et != "" && !strings.HasPrefix(et, "W/") {
		return et
	}
	lm := h.Get("Last-Modified")
	modified, err := http.ParseTime(lm)
	if err != nil {
		return ""
	}
	if date, err := http.ParseTime(h.Get("Date")); err != nil || date.Sub(modified) < time.Second {
		return ""
	}
	return lm
}

// Check verifies that an owner's answer is slice s of the object
// version and size the head named.
func Check(resp *http.Response, s *Req, total int64) error {
	if resp.StatusCode == http.StatusPreconditionFailed {
		return ErrChanged
	}
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("slice %d: owner answered %d", s.Index, resp.StatusCode)
	}
	start, end, t, ok := httpcache.ParseContentRange(resp.Header.Get("Content-Range"))
	switch {
	case !ok || start != s.Start():
		return fmt.Errorf("slice %d: owner answered range %q", s.Index, resp.Header.Get("Content-Range"))
	case t != total || end != s.Last(total) || Version(resp.Header) != s.Version:
		return ErrChanged
	}
	return nil
}

// Plan appends the indexes of the slices covering length bytes from
// start.
func Plan(plan []int64, start, length, size int64) []int64 {
	if length <= 0 {
		return plan
	}
	for i := start / size; i <= (start+length-1)/size; i++ {
		plan = append(plan, i)
	}
	return plan
}

// Body reads an object's bytes from its slices, in the order of
// plan, with up to Window slices asked for ahead.
type Body struct {
	ctx         context.Context
	cancel      context.CancelFunc
	size, total int64
	plan        []int64
	fetch       func(ctx context.Context, index int64) (*http.Response, error)

	mu      sync.Mutex
	fetches []*slot // by plan position, once started
	next    int     // plan position of the next slice to read
	closed  bool
}

// slot is one slice asked for.
type slot struct {
	done chan struct{}
	resp *http.Response
	err  error
}

func doneFetch(resp *http.Response) *slot {
	f := &slot{done: make(chan struct{}), resp: resp}
	close(f.done)
	return f
}

// start asks for the slice at plan position i, unless it was.
func (b *Body) start(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= len(b.plan) || b.fetches[i] != nil || b.closed {
		return
	}
	f := &slot{done: make(chan struct{})}
	b.fetches[i] = f
	go func() {
		defer close(f.done)
		resp, err := b.fetch(b.ctx, b.plan[i])
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closed && resp != nil {
			resp.Body.Close() // nobody will read it
			resp = nil
			err = context.Canceled
		}
		f.resp, f.err = resp, err
	}()
}

// Wait starts the slices from plan position i on (up to the window) and
// waits for position i's answer.
func (b *Body) Wait(i int) error {
	for j := i; j < i+Window; j++ {
		b.start(j)
	}
	b.mu.Lock()
	f := b.fetches[i]
	b.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-b.ctx.Done():
		return b.ctx.Err()
	}
}

// take returns the next planned slice's answer.
func (b *Body) take() (int64, io.ReadCloser, error) {
	i := b.next
	if i >= len(b.plan) {
		return 0, nil, errors.New("slices: read past the plan")
	}
	b.next++
	if err := b.Wait(i); err != nil {
		return 0, nil, err
	}
	return b.plan[i], b.fetches[i].resp.Body, nil
}

// Close stops what is still being fetched and closes what was not read.
func (b *Body) Close() {
	b.cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, f := range b.fetches {
		if f == nil {
			continue
		}
		select {
		case <-f.done:
			if f.resp != nil {
				f.resp.Body.Close()
			}
		default: // its goroutine closes it
		}
	}
}

// Section reads length bytes from start, from the next slices of the plan.
func (b *Body) Section(start, length int64) io.Reader {
	return &reader{b: b, off: start, end: start + length}
}

type reader struct {
	b        *Body
	off, end int64
	cur      io.ReadCloser
	curEnd   int64
	rest     [1]byte // what a slice read to its end is read on into, for its EOF
}

func (s *reader) Read(p []byte) (int, error) {
	if s.off >= s.end {
		return 0, io.EOF
	}
	if s.cur == nil {
		index, body, err := s.b.take()
		if err != nil {
			return 0, err
		}
		first := index * s.b.size
		if s.off < first || s.off >= first+s.b.size {
			body.Close()
			return 0, fmt.Errorf("slices: slice %d does not hold byte %d", index, s.off)
		}
		if _, err := io.CopyN(io.Discard, body, s.off-first); err != nil {
			body.Close()
			return 0, fmt.Errorf("slice %d broke off: %w", index, err)
		}
		s.cur, s.curEnd = body, min(first+s.b.size, s.b.total)
	}
	want := min(int64(len(p)), s.end-s.off, s.curEnd-s.off)
	k, err := s.cur.Read(p[:want])
	s.off += int64(k)
	if s.off == s.curEnd {
		// A slice read to its end is read on to its EOF: its owner ends
		// the answer once the slice is stored, so an answer assembled
		// whole ends after its slices are stored, and the next request
		// finds them.
		_ = reply.ReadEnd(s.cur, s.rest[:]) // its bytes are all here, whatever follows
	}
	if s.off == s.curEnd || s.off == s.end {
		s.cur.Close()
		s.cur = nil
		return k, nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // a slice shorter than its range
	}
	return k, err
}

// NewBody reads an object of total bytes, in slices of size, by the
// indexes of plan; fetch asks for one. first, when not nil, is the answer
// for plan[0] already at hand. Close ends it.
func NewBody(ctx context.Context, size, total int64, plan []int64, fetch func(ctx context.Context, index int64) (*http.Response, error), first *http.Response) *Body {
	b := &Body{size: size, total: total, plan: plan, fetches: make([]*slot, len(plan)), fetch: fetch}
	b.ctx, b.cancel = context.WithCancel(ctx)
	if first != nil {
		b.fetches[0] = doneFetch(first)
	}
	return b
}
