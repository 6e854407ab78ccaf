package dataplane

import (
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

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
)

// serveSliced answers r from the slices of the object under key. It
// reports false, having written nothing, when the object cannot be sliced
// consistently (no validator): the caller then serves it whole.
func (n *Node) serveSliced(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy) bool {
	for attempt := 0; ; attempt++ {
		err := n.serveSlicedOnce(w, r, key, p)
		switch {
		case err == nil:
			return true
		case errors.Is(err, errNotSliceable):
			return false
		case errors.Is(err, errSliceChanged) && attempt == 0:
			continue // the stale head is dropped; start again from the new one
		case r.Context().Err() != nil:
			return true // the client went away
		}
		http.Error(w, "shardcache: "+err.Error(), http.StatusBadGateway)
		return true
	}
}

// serveSlicedOnce is one attempt of serveSliced. It returns an error only
// before anything is written; a failure while the body is sent aborts the
// response, so the client sees a broken transfer, never a wrong body.
func (n *Node) serveSlicedOnce(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	size := p.SliceSize
	headReq := &sliceReq{size: size}
	method := http.MethodHead
	if wantsFirstSlice(r, size) {
		method = http.MethodGet
	}
	head := n.fetchSlice(ctx, r, key, p, headReq, method)
	if head.StatusCode != http.StatusPartialContent {
		defer head.Body.Close()
		n.passOn(w, r, head)
		return nil
	}
	cr := head.Header.Get("Content-Range")
	start, _, total, ok := httpcache.ParseContentRange(cr)
	if !ok || start != 0 || total < 0 {
		head.Body.Close()
		return fmt.Errorf("slice 0 of the object came with range %q", cr)
	}
	version := objectVersion(head.Header)
	if version == "" && total > size {
		head.Body.Close()
		return errNotSliceable
	}
	e := sliceEntry(key, head, total)
	xcache := head.Header.Get("X-Cache")
	if httpcache.NotModified(r.Method, r.Header, e.Status, e.Header) {
		head.Body.Close()
		n.writeNotModified(w, e, xcache)
		return nil
	}
	ranges, rerr := rangesFor(r, e, false)
	var plan []int64
	if r.Method != http.MethodHead {
		if ranges == nil && rerr == nil {
			plan = slicePlan(plan, 0, total, size)
		}
		for _, rg := range ranges {
			plan = slicePlan(plan, rg.Start, rg.Length, size)
		}
	}
	body := &slicedBody{
		size: size, total: total, plan: plan, fetches: make([]*sliceFetch, len(plan)),
		fetch: func(ctx context.Context, i int64) (*http.Response, error) {
			s := &sliceReq{index: i, size: size, version: version}
			resp := n.fetchSlice(ctx, r, key, p, s, http.MethodGet)
			if err := checkSlice(resp, s, total); err != nil {
				resp.Body.Close()
				if errors.Is(err, errSliceChanged) {
					n.dropSlice(r, key, p, headReq)
				}
				return nil, err
			}
			return resp, nil
		},
	}
	body.ctx, body.cancel = context.WithCancel(ctx)
	defer body.close()
	if len(plan) > 0 && plan[0] == 0 && method == http.MethodGet {
		body.fetches[0] = doneFetch(head)
	} else {
		head.Body.Close()
	}
	if len(plan) > 0 {
		// The first slice decides between an answer and an error: once the
		// status is sent, a failure can only break the transfer off.
		if err := body.wait(0); err != nil {
			return err
		}
	}
	h := w.Header()
	copyHeader(h, e.Header)
	h.Set("Accept-Ranges", "bytes")
	n.cacheHeaders(h, e, xcache)
	if ranges != nil || errors.Is(rerr, httpcache.ErrRangeUnsatisfiable) {
		if err := answerRanges(w, r, e, ranges, body.section); err != nil && !isWriteError(err) {
			return breakOff(w)
		}
		return nil
	}
	h.Set("Content-Length", strconv.FormatInt(total, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, body.section(0, total)); err != nil && !isWriteError(err) {
		return breakOff(w)
	}
	return nil
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
	relay.RemoveHopByHop(h)
	for _, f := range []string{"Content-Range", "Content-Length", "X-Cache", "X-Cache-Node", "Age", relay.PurgeRevisionHeader} {
		h.Del(f)
	}
	age, _ := strconv.ParseInt(head.Header.Get("Age"), 10, 64)
	return &store.Entry{Key: key, Status: http.StatusOK, Header: h, Received: time.Now(),
		InitialAge: time.Duration(age) * time.Second, Length: total, Size: total}
}

// passOn answers r with an owner's answer that is not a slice: the
// object's error, redirect, or whole body.
func (n *Node) passOn(w http.ResponseWriter, r *http.Request, resp *http.Response) {
	relay.RemoveHopByHop(resp.Header)
	resp.Header.Del(relay.PurgeRevisionHeader)
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		io.Copy(w, resp.Body)
	}
}

// checkSlice verifies that an owner's answer is slice s of the object
// version and size the head named.
func checkSlice(resp *http.Response, s *sliceReq, total int64) error {
	if resp.StatusCode == http.StatusPreconditionFailed {
		return errSliceChanged
	}
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("slice %d: owner answered %d", s.index, resp.StatusCode)
	}
	start, end, t, ok := httpcache.ParseContentRange(resp.Header.Get("Content-Range"))
	switch {
	case !ok || start != s.start():
		return fmt.Errorf("slice %d: owner answered range %q", s.index, resp.Header.Get("Content-Range"))
	case t != total || end != s.last(total) || objectVersion(resp.Header) != s.version:
		return errSliceChanged
	}
	return nil
}

// slicePlan appends the indexes of the slices covering length bytes from
// start.
func slicePlan(plan []int64, start, length, size int64) []int64 {
	if length <= 0 {
		return plan
	}
	for i := start / size; i <= (start+length-1)/size; i++ {
		plan = append(plan, i)
	}
	return plan
}

// slicedBody reads an object's bytes from its slices, in the order of
// plan, with up to sliceWindow slices asked for ahead.
type slicedBody struct {
	ctx         context.Context
	cancel      context.CancelFunc
	size, total int64
	plan        []int64
	fetch       func(ctx context.Context, index int64) (*http.Response, error)

	mu      sync.Mutex
	fetches []*sliceFetch // by plan position, once started
	next    int           // plan position of the next slice to read
	closed  bool
}

// sliceFetch is one slice asked for.
type sliceFetch struct {
	done chan struct{}
	resp *http.Response
	err  error
}

func doneFetch(resp *http.Response) *sliceFetch {
	f := &sliceFetch{done: make(chan struct{}), resp: resp}
	close(f.done)
	return f
}

// start asks for the slice at plan position i, unless it was.
func (b *slicedBody) start(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= len(b.plan) || b.fetches[i] != nil || b.closed {
		return
	}
	f := &sliceFetch{done: make(chan struct{})}
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

// wait starts the slices from plan position i on (up to the window) and
// waits for position i's answer.
func (b *slicedBody) wait(i int) error {
	for j := i; j < i+sliceWindow; j++ {
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
func (b *slicedBody) take() (int64, io.ReadCloser, error) {
	i := b.next
	if i >= len(b.plan) {
		return 0, nil, errors.New("slices: read past the plan")
	}
	b.next++
	if err := b.wait(i); err != nil {
		return 0, nil, err
	}
	return b.plan[i], b.fetches[i].resp.Body, nil
}

// close stops what is still being fetched and closes what was not read.
func (b *slicedBody) close() {
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

// section reads length bytes from start, from the next slices of the plan.
func (b *slicedBody) section(start, length int64) io.Reader {
	return &sliceSection{b: b, off: start, end: start + length}
}

type sliceSection struct {
	b        *slicedBody
	off, end int64
	cur      io.ReadCloser
	curEnd   int64
}

func (s *sliceSection) Read(p []byte) (int, error) {
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

// inProcess serves a peer request with this node's peer handler, without
// the network: the answer streams through a pipe as it is written.
func (n *Node) inProcess(req *http.Request) *http.Response {
	pr, pw := io.Pipe()
	w := &pipeWriter{h: http.Header{}, pw: pw, body: pr, ready: make(chan *http.Response, 1)}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					n.log.Error("slice handler failed", "panic", v)
				}
				w.WriteHeader(http.StatusBadGateway) // when nothing was written
				pw.CloseWithError(errors.New("slice answer broke off"))
				return
			}
			w.WriteHeader(http.StatusOK) // when nothing was written
			pw.Close()
		}()
		n.servePeer(w, req)
	}()
	return <-w.ready
}

// pipeWriter is the ResponseWriter of an in-process peer request.
type pipeWriter struct {
	h     http.Header
	pw    *io.PipeWriter
	body  *io.PipeReader
	ready chan *http.Response
	wrote bool
}

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
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(p)
}
