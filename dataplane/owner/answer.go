package owner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/coalesce"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Answer writes a stored entry to w, its body from memory, from its disk
// record (by sendfile where the platform has it), or from rd, a reader
// following the entry's fill as it streams in. The stored coding is sent
// to a client that accepts it and decoded for one that does not. A client
// whose conditional matches gets 304 (RFC 9111 4.3.2).
//
// It returns an error, having written nothing, when the body cannot be
// read at all. A fill that breaks off after the header was sent aborts the
// response, so the client sees a broken transfer rather than a short body.
func (o *Owner) Answer(w http.ResponseWriter, r *http.Request, e *store.Entry, rd io.Reader, status string) error {
	h := w.Header()
	if httpcache.NotModified(r.Method, r.Header, e.Status, e.Header) {
		o.writeNotModified(w, r, e, status)
		return nil
	}
	switch ranges, err := rangesFor(r, e, rd != nil); {
	case rd != nil && len(ranges) == 1:
		// A range of an object still streaming in: answered as its bytes
		// arrive, then the rest is read, so the answer ends with the fill.
		o.answerFollowing(w, r, e, rd, span{0, e.Length - 1, e.Length}, ranges[0], status)
		io.Copy(io.Discard, rd)
		return nil
	case rd != nil && errors.Is(err, httpcache.ErrRangeUnsatisfiable):
		for k, v := range e.Header {
			h[k] = v
		}
		o.cacheHeaders(h, r, e, status)
		answerRanges(w, r, e.Header, e.Length, nil, nil)
		return nil
	case ranges != nil || errors.Is(err, httpcache.ErrRangeUnsatisfiable):
		body, done, err := o.readerAt(e)
		if err != nil {
			return err
		}
		defer done()
		for k, v := range e.Header {
			h[k] = v
		}
		h.Del("Content-Length")
		h.Set("Accept-Ranges", "bytes")
		o.cacheHeaders(h, r, e, status)
		section := func(start, length int64) io.Reader { return io.NewSectionReader(body, start, length) }
		if err := answerRanges(w, r, e.Header, e.Length, ranges, section); err != nil && !reply.IsWriteError(err) {
			return reply.BreakOff(w) // the stored body could not be read: do not end it cleanly
		}
		return nil
	}
	var src io.Reader
	var follow *reply.ErrReader
	switch {
	case rd != nil:
		// Wait for the first bytes (or the end) before committing to a
		// status: a fill that fails at once is answered 502.
		first := make([]byte, 32<<10)
		k, err := io.ReadAtLeast(rd, first, 1)
		if err != nil && err != io.EOF {
			return err
		}
		follow = &reply.ErrReader{R: io.MultiReader(bytes.NewReader(first[:k]), rd)}
		src = follow
	case e.InMemory():
		// Written below as it is.
	default:
		f, err := o.cfg.Store.Open(e)
		if err != nil {
			return err
		}
		defer f.Close()
		src = &io.LimitedReader{R: f, N: e.Size} // what sendfile recognises
	}
	for k, v := range e.Header {
		h[k] = v // entries are immutable; the slices are only read
	}
	length, decode := e.Length, false
	if e.Coding != "" {
		httpcache.AddVary(h, "Accept-Encoding")
		httpcache.WeakenETag(h)
		if httpcache.Accepts(r.Header, e.Coding) {
			h.Set("Content-Encoding", e.Coding)
			length = e.Size
		} else {
			decode = true
		}
	}
	h.Del("Content-Length")
	if rd == nil && e.Coding == "" && e.Status == http.StatusOK && e.Length >= 0 {
		h["Accept-Ranges"] = acceptRangesBytes
	}
	if length >= 0 && reply.BodyAllowed(e.Status) {
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	}
	o.cacheHeaders(h, r, e, status)
	w.WriteHeader(e.Status)
	if r.Method == http.MethodHead || !reply.BodyAllowed(e.Status) {
		return nil
	}
	if e.InMemory() && rd == nil && !decode {
		coalesce.Hold(r, int64(len(e.Body))) // a small answer from memory leaves in one write
		w.Write(e.Body)
		return nil
	}
	if src == nil {
		src = bytes.NewReader(e.Body) // in memory, decoded for this client
	}
	if decode {
		d := decoders.Get().(*zstd.Decoder)
		defer func() {
			d.Reset(nil)
			decoders.Put(d)
		}()
		if err := d.Reset(src); err != nil {
			return reply.BreakOff(w)
		}
		src = d
	}
	_, err := io.Copy(w, src)
	if err != nil && (follow != nil && follow.Err != nil || decode && !reply.IsWriteError(err)) {
		return reply.BreakOff(w) // the body broke off: do not end it cleanly
	}
	return nil
}

// writeNotModified answers 304 for e (RFC 9111 4.3.2): its header
// fields but those describing the body.
func (o *Owner) writeNotModified(w http.ResponseWriter, r *http.Request, e *store.Entry, status string) {
	h := w.Header()
	for k, v := range e.Header {
		h[k] = v
	}
	for _, k := range []string{"Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding", "Content-Range"} {
		h.Del(k)
	}
	if e.Coding != "" {
		httpcache.AddVary(h, "Accept-Encoding")
		httpcache.WeakenETag(h)
	}
	o.cacheHeaders(h, r, e, status)
	w.WriteHeader(http.StatusNotModified)
}

// cacheHeaders sets Age, X-Cache, X-Cache-Node and Cache-Status. The
// names are canonical already, so the fields are set without the work
// Header.Set does to canonicalise them, on every answer.
func (o *Owner) cacheHeaders(h http.Header, r *http.Request, e *store.Entry, status string) {
	age := e.Age(time.Now())
	h["Age"] = []string{strconv.FormatInt(int64(age/time.Second), 10)}
	h["X-Cache"] = statusField(status)
	h["X-Cache-Node"] = o.nodeField
	m := httpcache.StatusMember{Node: o.statusName, Cache: status, TTL: e.Lifetime - age, HasTTL: true}
	if showsKey(r) {
		m.Key = e.Key
	}
	switch status {
	case httpcache.CacheMiss, httpcache.CacheExpired, cacheCollapsed:
		m.Status, m.Stored = e.Status, true
	case httpcache.CacheRevalidated:
		m.Status, m.Stored = http.StatusNotModified, true
	}
	var buf [128]byte
	addCacheStatus(h, string(m.Append(buf[:0])))
}

// addCacheStatus adds this node's member to the Cache-Status of the
// caches before it (an origin's own), never writing into a stored slice.
func addCacheStatus(h http.Header, member string) {
	prior := h["Cache-Status"]
	h["Cache-Status"] = append(prior[:len(prior):len(prior)], member)
}

// statusHeaders sets X-Cache, X-Cache-Node and Cache-Status for an answer
// that is not stored: the origin's, with its status, or the node's own
// error (status 0).
func (o *Owner) statusHeaders(h http.Header, status string, code int) {
	h["X-Cache"] = statusField(status)
	h["X-Cache-Node"] = o.nodeField
	m := httpcache.StatusMember{Node: o.statusName, Cache: status, Status: code}
	addCacheStatus(h, m.String())
}

// originError answers code for a failure to get an answer from the
// origin: Proxy-Status names the error's type (RFC 9209).
func (o *Owner) originError(w http.ResponseWriter, code int, err error, msg string) {
	h := w.Header()
	o.statusHeaders(h, httpcache.CacheMiss, 0)
	h["Proxy-Status"] = []string{httpcache.ProxyStatus(o.statusName, httpcache.ErrorType(err), httpcache.ErrorDetails(err))}
	http.Error(w, "shardcache: "+msg, code)
}

// acceptRangesBytes is Accept-Ranges: bytes, shared as statusFields are.
var acceptRangesBytes = []string{"bytes"}

// statusFields are the X-Cache values as header values, shared by every
// answer: a slice whose length is its capacity is never written through
// (an append copies it).
var statusFields = map[string][]string{}

func init() {
	for _, s := range []string{httpcache.CacheHit, httpcache.CacheMiss, httpcache.CacheStale, httpcache.CacheBypass, httpcache.CacheRevalidated} {
		statusFields[s] = []string{s}
	}
	statusFields[cacheCollapsed] = statusFields[httpcache.CacheHit]
}

// cacheCollapsed is the status of an answer shared from another
// request's fill: X-Cache says HIT, Cache-Status says collapsed.
const cacheCollapsed = "COLLAPSED"

// statusKey marks, in a request's context, a policy that shows the cache
// key in Cache-Status.
type statusKey struct{}

// withStatusKey is r marked so when p says (cache_status_key).
func withStatusKey(r *http.Request, p *policy.Policy) *http.Request {
	if !p.CacheStatusKey {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), statusKey{}, true))
}

func showsKey(r *http.Request) bool {
	v, _ := r.Context().Value(statusKey{}).(bool)
	return v
}

// statusField returns status as a header value.
func statusField(status string) []string {
	if f, ok := statusFields[status]; ok {
		return f
	}
	return []string{status}
}
