package owner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
)

// serveSliced answers the request from the slices of the object under
// its key. It writes nothing (Outcome.Served false) when the object cannot
// be sliced consistently (no validator): the front then serves it whole.
func (s *serving) serveSliced() {
	s.out.Source = SourceSlices
	for attempt := 0; ; attempt++ {
		err := s.serveSlicedOnce()
		switch {
		case err == nil:
			s.out.Served = true
			return
		case errors.Is(err, errNotSliceable):
			return
		case errors.Is(err, slice.ErrChanged) && attempt == 0:
			continue // the stale head is dropped; start again from the new one
		case s.r.Context().Err() != nil:
			s.out.Served = true
			return // the client went away
		}
		s.out.Served = true
		http.Error(s.w, "shardcache: "+err.Error(), http.StatusBadGateway)
		return
	}
}

// serveSlicedOnce is one attempt of ServeSliced. It returns an error only
// before anything is written; a failure while the body is sent aborts the
// response, so the client sees a broken transfer, never a wrong body.
func (s *serving) serveSlicedOnce() error {
	w, r, key, p := s.w, s.r, s.key, s.p
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	size := p.SliceSize
	headReq := &slice.Req{Size: size}
	method := http.MethodHead
	if wantsFirstSlice(r, size) {
		method = http.MethodGet
	}
	head := s.fetchSlice(ctx, headReq, method)
	if head.StatusCode != http.StatusPartialContent {
		defer head.Body.Close()
		s.passOn(head)
		return nil
	}
	cr := head.Header.Get("Content-Range")
	start, _, total, ok := httpcache.ParseContentRange(cr)
	if !ok || start != 0 || total < 0 {
		head.Body.Close()
		return fmt.Errorf("slice 0 of the object came with range %q", cr)
	}
	version := slice.Version(head.Header)
	if version == "" && total > size {
		head.Body.Close()
		return errNotSliceable
	}
	e := sliceEntry(key, head, total)
	xcache := head.Header.Get("X-Cache")
	if httpcache.NotModified(r.Method, r.Header, e.Status, e.Header) {
		head.Body.Close()
		s.writeNotModified(e, xcache)
		return nil
	}
	ranges, rerr := rangesFor(r, e, false)
	var plan []int64
	if r.Method != http.MethodHead {
		if ranges == nil && rerr == nil {
			plan = slice.Plan(plan, 0, total, size)
		}
		for _, rg := range ranges {
			plan = slice.Plan(plan, rg.Start, rg.Length, size)
		}
	}
	var why string
	if len(plan) > 0 {
		// The answer's X-Cache tells of every slice it uses, not slice 0's
		// alone, and its reason is that of the first it could not use.
		xcache, why = s.slicesCache(ctx, version, plan, head.Header)
	}
	if xcache != httpcache.CacheHit {
		s.reason = cmp.Or(why, slicedReason(head.Header))
	}
	var first *http.Response
	if len(plan) > 0 && plan[0] == 0 && method == http.MethodGet {
		first = head
	} else {
		head.Body.Close()
	}
	body := slice.NewBody(ctx, size, total, plan, func(ctx context.Context, i int64) (*http.Response, error) {
		sl := &slice.Req{Index: i, Size: size, Version: version}
		resp := s.fetchSlice(ctx, sl, http.MethodGet)
		if err := slice.Check(resp, sl, total); err != nil {
			resp.Body.Close()
			if errors.Is(err, slice.ErrChanged) {
				s.dropSlice(headReq)
			}
			return nil, err
		}
		return resp, nil
	}, first)
	defer body.Close()
	if len(plan) > 0 {
		// The first slice decides between an answer and an error: once the
		// status is sent, a failure can only break the transfer off.
		if err := body.Wait(0); err != nil {
			return err
		}
	}
	h := w.Header()
	reply.CopyHeader(h, e.Header)
	h.Set("Accept-Ranges", "bytes")
	s.cacheHeaders(h, e, xcache)
	if ranges != nil || errors.Is(rerr, httpcache.ErrRangeUnsatisfiable) {
		if err := writeRanges(w, r, e.Header, e.Length, ranges, body.Section); err != nil && !reply.IsWriteError(err) {
			return reply.BreakOff(w)
		}
		return nil
	}
	h.Set("Content-Length", strconv.FormatInt(total, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := copyAssembled(w, body.Section(0, total), xcache == httpcache.CacheHit); err != nil && !reply.IsWriteError(err) {
		return reply.BreakOff(w)
	}
	return nil
}

// assembleChunk is what an assembled answer whose slices are all stored
// reads before it writes.
const assembleChunk = 256 << 10

var assembleBuffers = sync.Pool{New: func() any { return new([assembleChunk]byte) }}

// copyAssembled copies an assembled body to w. With every slice stored
// (stored), it reads chunks of assembleChunk and writes each whole: a
// relayed slice arrives a TLS record (16 KiB) a read, and written as it
// came it cost the client's connection a system call each. Otherwise each
// slice's bytes go out as its owner's fill streams them.
func copyAssembled(w io.Writer, src io.Reader, stored bool) (int64, error) {
	if !stored {
		return io.Copy(w, src)
	}
	buf := assembleBuffers.Get().(*[assembleChunk]byte)
	defer assembleBuffers.Put(buf)
	var total int64
	for {
		n, err := 0, error(nil)
		for n < len(buf) && err == nil {
			var k int
			k, err = src.Read(buf[n:])
			n += k
		}
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// slicedReason is why a slice's answer (h) is not a plain hit: its
// reason, from its owner's Cache-Status member, else that the slice is
// not stored.
func slicedReason(h http.Header) string {
	if m, ok := httpcache.MemberOf(h["Cache-Status"], h.Get("X-Cache-Node")); ok && m["detail"] != "" {
		return m["detail"]
	}
	return httpcache.ReasonURIMiss
}

// wantsFirstSlice reports whether r's answer starts in the first slice, so
// that the head is fetched with its body.
func wantsFirstSlice(r *http.Request, size int64) bool {
	if r.Method == http.MethodHead {
		return false
	}
	field := r.Header.Get("Range")
	if field == "" {
		return true
	}
	ranges, err := httpcache.ParseRange(field, math.MaxInt64)
	return err != nil || slices.ContainsFunc(ranges, func(b httpcache.ByteRange) bool { return b.Start < size })
}

// sliceEntry is the object as the head describes it, to answer a client
// with: status 200, the head's header without its slice framing.
func sliceEntry(key string, head *http.Response, total int64) *store.Entry {
	h := head.Header.Clone()
	httpcache.RemoveHopByHop(h)
	for _, f := range []string{"Content-Range", "Content-Length", "X-Cache", "X-Cache-Node", "Cache-Status", "Age", hop.PurgeRevisionField} {
		h.Del(f)
	}
	age, _ := strconv.ParseInt(head.Header.Get("Age"), 10, 64)
	return &store.Entry{Key: key, Status: http.StatusOK, Header: h, Received: time.Now(),
		InitialAge: time.Duration(age) * time.Second, Length: total, Size: total}
}

// passOn answers with an owner's answer that is not a slice: the object's
// error, redirect, or whole body.
func (s *serving) passOn(resp *http.Response) {
	w, r := s.w, s.r
	httpcache.RemoveHopByHop(resp.Header)
	resp.Header.Del(hop.PurgeRevisionField)
	reply.CopyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		reply.Pass(w, resp.Body)
	}
}

// inProcess serves a slice request with this node's own stages, without
// the network: the answer streams through a pipe as it is written.
func (s *serving) inProcess(req *http.Request, sl *slice.Req) *http.Response {
	pr, pw := io.Pipe()
	w := &pipeWriter{h: http.Header{}, pw: pw, body: pr, ready: make(chan *http.Response, 1)}
	sreq := &Request{HTTP: req, Key: sl.Key(s.key), Policy: s.p, Routes: s.req.Routes, Now: time.Now(), Hop: Hop{From: s.cfg.ID}, Slice: sl}
	s.cfg.Tasks.Go("slice", func() {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					s.cfg.Logger.Error("slice handler failed", "panic", v)
				}
				w.WriteHeader(http.StatusBadGateway) // when nothing was written
				pw.CloseWithError(errors.New("slice answer broke off"))
				return
			}
			w.WriteHeader(http.StatusOK) // when nothing was written
			pw.Close()
		}()
		ss := s.fork(w, sreq)
		ss.serve()
		if ss.out.Served && w.broken {
			panic(http.ErrAbortHandler)
		}
	})
	return <-w.ready
}

// pipeWriter is the ResponseWriter of an in-process peer request.
type pipeWriter struct {
	h      http.Header
	pw     *io.PipeWriter
	body   *io.PipeReader
	ready  chan *http.Response
	wrote  bool
	broken bool
}

// BreakOff marks the answer broken: the pipe is closed with an error, so
// the assembler sees the slice break off.
func (w *pipeWriter) BreakOff() { w.broken = true }

func (w *pipeWriter) Header() http.Header { return w.h }

func (w *pipeWriter) WriteHeader(code int) {
	if w.wrote || code < 200 {
		return // interim answers are not passed on
	}
	w.wrote = true
	resp := &http.Response{StatusCode: code, Header: w.h.Clone(), Body: w.body, ContentLength: -1}
	if cl, err := strconv.ParseInt(w.h.Get("Content-Length"), 10, 64); err == nil {
		resp.ContentLength = cl
	}
	w.ready <- resp
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	if w.broken {
		return 0, reply.ErrBrokenOff
	}
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(p)
}
