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
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/store"
)

// leadAnswer is a fill's own answer, decided by fetch and admit, and
// written by answerFill once the fill has shared what it may.
type leadAnswer struct {
	kind   int
	e      *store.Entry
	wr     *store.Writer // answerStream: the fill
	rd     io.ReadCloser // and its reader
	status string
	code   int
	err    error
	msg    string
}

// What a fill answers.
const (
	answered       = iota // answered already, or nothing to answer (a pre-copy)
	answerEntry           // e, as status
	answerStream          // e, its body from rd, as status
	answerError           // the origin's failure: code, err and msg
	answerText            // msg, with code
	answerUnstored        // the fetched response, not stored, as status
)

// answerFill answers from fill f what fetch and admit decided, and makes
// its outcome this request's.
func (s *serving) answerFill(f *fill) {
	switch t := f.then; t.kind {
	case answerEntry:
		f.Answer(t.e, nil, t.status)
	case answerStream:
		started := f.req.Account.Now()
		err := f.Answer(t.e, t.rd, t.status)
		t.rd.Close()
		if a := f.req.Account; a != nil {
			a.Store = time.Since(started)
		}
		if err != nil {
			f.originError(http.StatusBadGateway, err, "origin response broke off")
		}
		f.keptBy(t.wr)
	case answerError:
		f.originError(t.code, t.err, t.msg)
	case answerText:
		http.Error(f.w, t.msg, t.code)
	case answerUnstored:
		f.writeResponse(f.resp, f.fromOrigin, t.status)
	}
	if !f.handed {
		f.release()
	}
	s.out = f.out
}

// keptBy corrects the outcome of an answer that followed fill wr: its
// header went out saying stored, but the disk tier may have refused the
// object as the fill ended (its admission, a full disk), or the object
// outgrew what a fill holds. Once the fill is over, the access log, the
// log streams and the notes say so, with the reason. (An answer without
// the body, a 304 or a HEAD, may end before the fill: it is left as it
// is.)
func (s *serving) keptBy(wr *store.Writer) {
	m := &s.out.Member
	over, stored, tooLarge := wr.Kept()
	switch {
	case !m.Stored || !over || stored:
	case tooLarge:
		m.Stored, m.Detail = false, httpcache.ReasonTooLarge
	default:
		m.Stored, m.Detail = false, httpcache.ReasonAdmission
	}
}

// Answer is the last stage: it writes a stored entry, its body from
// memory, from its disk record (by sendfile where the platform has it),
// or from rd, a reader following the entry's fill as it streams in. The
// stored coding is sent to a client that accepts it and decoded for one
// that does not. A client whose conditional matches gets 304 (RFC 9111
// 4.3.2); a Range is answered from a stored 200 (answerRanges).
//
// It returns an error, having written nothing, when the body cannot be
// read at all. A fill that breaks off after the header was sent aborts the
// response, so the client sees a broken transfer rather than a short body.
func (s *serving) Answer(e *store.Entry, rd io.Reader, status string) error {
	if rd == nil {
		s.out.Source = SourceDisk
		if e.InMemory() {
			s.out.Source = SourceMemory
		}
	}
	r := s.r
	if httpcache.NotModified(r.Method, r.Header, e.Status, e.Header) {
		s.writeNotModified(e, status)
		return nil
	}
	if ranges, err := rangesFor(r, e, rd != nil); ranges != nil || errors.Is(err, httpcache.ErrRangeUnsatisfiable) {
		return s.answerRanges(e, rd, ranges, status)
	}
	if rd == nil && e.InMemory() && e.Coding == "" && r.Method == http.MethodGet && s.answerWhole(e, status) {
		return nil
	}
	var src io.Reader
	var follow *reply.ErrReader
	switch {
	case rd != nil:
		// Wait for the first bytes (or the end) before committing to a
		// status: a fill that fails at once is answered 502.
		buf := reply.Buffer()
		defer reply.Return(buf) // read from until the answer is written
		first := buf[:]
		k, err := io.ReadAtLeast(rd, first, 1)
		if err != nil && err != io.EOF {
			return err
		}
		follow = &reply.ErrReader{R: io.MultiReader(bytes.NewReader(first[:k]), rd)}
		src = follow
	case e.InMemory():
		// Written below as it is.
	default:
		f, err := s.cfg.Store.Open(e)
		if err != nil {
			return err
		}
		defer f.Close()
		src = &io.LimitedReader{R: f, N: e.Size} // what sendfile recognises
	}
	h := s.w.Header()
	for k, v := range e.Header {
		h[k] = v // entries are immutable; the slices are only read
	}
	length, decode := e.Length, false
	if e.Coding != "" {
		httpcache.AddVary(h, "Accept-Encoding")
		httpcache.WeakenETag(h)
		// A response that came with no-transform or a digest, or a
		// request that asks no-transform, gets the origin's bytes: a 304
		// may have brought either to a body stored coded.
		if httpcache.Accepts(r.Header, e.Coding) && !httpcache.KeepsItsBytes(e.Header) && !s.dirs.Has("no-transform") {
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
	s.cacheHeaders(h, e, status)
	s.w.WriteHeader(e.Status)
	if r.Method == http.MethodHead || !reply.BodyAllowed(e.Status) {
		return nil
	}
	if e.InMemory() && rd == nil && !decode {
		s.w.Write(e.Body)
		return nil
	}
	if src == nil {
		src = bytes.NewReader(e.Body) // in memory, decoded for this client
	}
	return s.writeBody(src, follow, decode)
}

// answerRanges answers ranges of e (nil: a 416): from rd when e
// is still streaming in (one range, answered as its bytes arrive, then
// the rest read so that the answer ends with the fill), else from the
// stored body.
func (s *serving) answerRanges(e *store.Entry, rd io.Reader, ranges []httpcache.ByteRange, status string) error {
	h := s.w.Header()
	switch {
	case rd != nil && len(ranges) == 1:
		s.answerFollowing(e, rd, span{0, e.Length - 1, e.Length}, ranges[0], status)
		io.Copy(io.Discard, rd)
		return nil
	case rd != nil:
		for k, v := range e.Header {
			h[k] = v
		}
		s.cacheHeaders(h, e, status)
		writeRanges(s.w, s.r, e.Header, e.Length, nil, nil)
		return nil
	}
	body, done, err := s.readerAt(e)
	if err != nil {
		return err
	}
	defer done()
	for k, v := range e.Header {
		h[k] = v
	}
	h.Del("Content-Length")
	h.Set("Accept-Ranges", "bytes")
	s.cacheHeaders(h, e, status)
	section := func(start, length int64) io.Reader { return io.NewSectionReader(body, start, length) }
	if err := writeRanges(s.w, s.r, e.Header, e.Length, ranges, section); err != nil && !reply.IsWriteError(err) {
		return reply.BreakOff(s.w) // the stored body could not be read: do not end it cleanly
	}
	return nil
}

// writeBody copies an answer's body, decoding it when the client does not
// accept the stored coding; a body that breaks off is broken off.
func (s *serving) writeBody(src io.Reader, follow *reply.ErrReader, decode bool) error {
	if decode {
		d := decoders.Get().(*zstd.Decoder)
		defer func() {
			d.Reset(nil)
			decoders.Put(d)
		}()
		if err := d.Reset(src); err != nil {
			return reply.BreakOff(s.w)
		}
		src = d
	}
	_, err := reply.Copy(s.w, src)
	if err != nil && (follow != nil && follow.Err != nil || decode && !reply.IsWriteError(err)) {
		return reply.BreakOff(s.w) // the body broke off: do not end it cleanly
	}
	return nil
}

// writeNotModified answers 304 for e (RFC 9111 4.3.2): its header
// fields but those describing the body.
func (s *serving) writeNotModified(e *store.Entry, status string) {
	h := s.w.Header()
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
	s.cacheHeaders(h, e, status)
	s.w.WriteHeader(http.StatusNotModified)
}

// cacheHeaders sets Age, X-Cache, X-Cache-Node and Cache-Status, and
// records them as the outcome. The names are canonical already, so the
// fields are set without the work Header.Set does to canonicalise them,
// on every answer.
func (s *serving) cacheHeaders(h http.Header, e *store.Entry, status string) {
	age, m := s.statusMember(e, status)
	h["Age"] = []string{strconv.FormatInt(int64(age/time.Second), 10)}
	h["X-Cache"] = statusField(status)
	h["X-Cache-Node"] = s.nodeField
	var buf [128]byte
	addCacheStatus(h, string(m.Append(buf[:0])))
	s.out.Member, s.out.Node = m, s.cfg.ID
	s.accountField(h)
}

// statusMember is e's age, and this node's Cache-Status member for an
// answer from e with status.
func (s *serving) statusMember(e *store.Entry, status string) (time.Duration, httpcache.StatusMember) {
	age := e.Age(s.req.Now)
	m := httpcache.StatusMember{Node: s.statusName, Cache: status, TTL: e.Lifetime - age, HasTTL: true, Detail: s.reason}
	if s.p.CacheStatusKey {
		m.Key = e.Key
	}
	switch status {
	case httpcache.CacheMiss, httpcache.CacheExpired, cacheCollapsed:
		m.Status, m.Stored = e.Status, true
	case httpcache.CacheRevalidated:
		m.Status, m.Stored = http.StatusNotModified, true
	}
	return age, m
}

// accountField sends the request's account back to the peer that asked
// for it (hop.AccountField).
func (s *serving) accountField(h http.Header) {
	if a := s.req.Account; a != nil && s.req.Hop.From != "" {
		h[hop.AccountField] = []string{a.Field()}
	}
}

// answerWhole writes an answer whole from e in memory (its identity body,
// no range, no conditional that matched) when the writer takes a whole
// answer (reply.Answerer, the client port's): the head serialised
// straight from e's stored header and the answer's own fields, with no
// header map filled, and the body, in one write. It writes what Answer's
// header map would hold. It reports false, having written nothing, when
// the writer takes no whole answer.
func (s *serving) answerWhole(e *store.Entry, status string) bool {
	if !reply.TakesWhole(s.w) || e.Length < 0 || !reply.BodyAllowed(e.Status) {
		return false
	}
	for _, f := range s.p.Targeted {
		if _, ok := e.Header[f]; ok {
			return false // the cluster's own field, which the answer drops
		}
	}
	set := s.w.Header() // the front's fields: a stored one of the same name replaces it
	ranges := e.Status == http.StatusOK
	id, ownID := reply.RequestID(s.w)
	buf := heads.Get().(*[]byte)
	defer heads.Put(buf)
	b := (*buf)[:0]
	sh := e.Head(func(h http.Header) any { return newStoredHead(h, ranges) }).(*storedHead)
	if len(set) > 0 {
		for _, k := range sh.names {
			delete(set, k)
		}
	}
	b = append(b, sh.fields...)
	if !ownID && len(sh.ids) > 0 { // else the request's own, not the one stored
		delete(set, "X-Request-Id")
		for _, v := range sh.ids {
			b = appendLine(b, "X-Request-Id", v)
		}
	}
	prior := sh.prior
	if ranges {
		b = appendLine(b, "Accept-Ranges", "bytes")
	}
	age, m := s.statusMember(e, status)
	b = append(b, "Age: "...)
	b = strconv.AppendInt(b, int64(age/time.Second), 10)
	b = append(b, "\r\n"...)
	b = appendLine(b, "X-Cache", statusField(status)[0])
	b = appendLine(b, "X-Cache-Node", s.nodeField[0])
	if ownID {
		b = appendLine(b, "X-Request-Id", id)
	}
	for _, v := range prior {
		b = appendLine(b, "Cache-Status", v)
	}
	b = append(b, "Cache-Status: "...)
	b = m.Append(b)
	b = append(b, "\r\n"...)
	*buf = b[:0] // grown, if it had to, for the next answer
	if !s.w.(reply.Answerer).Answer(e.Status, b, e.Body) {
		return false
	}
	s.out.Member, s.out.Node = m, s.cfg.ID
	return true
}

// storedHead is a stored header as whole answers repeat it, serialised once
// per entry held in memory (store.Entry.Head): the fields written as
// stored, the stored Cache-Status members the answer's own follows, and the
// stored X-Request-Id, written only when the request has no id of its own.
// Content-Length, Age, X-Cache and X-Cache-Node are the answer's own, and
// so is Accept-Ranges for a 200.
type storedHead struct {
	fields     []byte   // "Name: value\r\n" lines
	names      []string // the fields' names, which replace the front's of the same name
	prior, ids []string
}

func newStoredHead(h http.Header, ranges bool) *storedHead {
	sh := &storedHead{}
	for k, vs := range h {
		switch k {
		case "Content-Length", "Age", "X-Cache", "X-Cache-Node":
			continue
		case "Cache-Status":
			sh.prior = vs
			continue
		case "Accept-Ranges":
			if ranges {
				continue
			}
		case "X-Request-Id":
			sh.ids = vs
			continue
		}
		sh.names = append(sh.names, k)
		for _, v := range vs {
			sh.fields = appendLine(sh.fields, k, v)
		}
	}
	return sh
}

// appendLine appends the field line "name: value" and its CRLF.
func appendLine(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// heads are the buffers answerWhole serialises heads into: the writer
// copies a head before Answer returns.
var heads = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// addCacheStatus adds this node's member to the Cache-Status of the
// caches before it (an origin's own), never writing into a stored slice.
func addCacheStatus(h http.Header, member string) {
	prior := h["Cache-Status"]
	h["Cache-Status"] = append(prior[:len(prior):len(prior)], member)
}

func init() {
	for _, s := range []string{httpcache.CacheHit, httpcache.CacheMiss, httpcache.CacheStale, httpcache.CacheBypass, httpcache.CacheRevalidated} {
		statusFields[s] = []string{s}
	}
	statusFields[cacheCollapsed] = statusFields[httpcache.CacheHit]
}

// cacheCollapsed is the status of an answer shared from another
// request's fill: X-Cache says HIT, Cache-Status says collapsed.
const cacheCollapsed = "COLLAPSED"

// statusField returns status as a header value.
func statusField(status string) []string {
	if f, ok := statusFields[status]; ok {
		return f
	}
	return []string{status}
}

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
