package owner

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/store"
)

// Partial content (RFC 9111 3.3 and 3.4). Under a policy with
// partial_content, a Range request for an object that is not stored is
// sent to the origin as that range, and the 206 is stored as the object's
// part: one contiguous span of its bytes, under partKey. A later range
// inside the part is served from it; a range reaching past either end asks
// the origin for the missing bytes only, conditional (If-Range) on the
// part's strong ETag, and the two are combined into one larger part, or,
// once they span the object, into the whole object stored under the key
// itself as a 200. A range apart from the part, or an answer under another
// validator, replaces it. Without a strong ETag parts are never combined.

// PartKey is where key's part is stored: among key's variants, so that
// dropping key drops it, and never equal to a variant key (those hold
// "field=value" pairs).
func PartKey(key string) string { return httpcache.VariantPrefix(key) + "part" }

// span is a part's bytes, first to last, of an object of total bytes.
type span struct{ first, last, total int64 }

func (s span) covers(rg httpcache.ByteRange) bool {
	return rg.Start >= s.first && rg.Start+rg.Length-1 <= s.last
}

// part returns key's stored part and its span.
func (o *Owner) part(key string) (*store.Entry, span, bool) {
	e, ok := o.cfg.Store.Get(PartKey(key))
	if !ok || !o.usable(e) || e.Status != http.StatusPartialContent {
		return nil, span{}, false
	}
	first, last, total, ok := httpcache.ParseContentRange(e.Header.Get("Content-Range"))
	if !ok || total < 0 || last-first+1 != e.Length {
		return nil, span{}, false
	}
	return e, span{first, last, total}, true
}

// strongETag is h's ETag when it is strong, else "".
func strongETag(h http.Header) string {
	if et := h.Get("Etag"); strings.HasPrefix(et, `"`) {
		return et
	}
	return ""
}

// partPlan is a range fill's request: the Range (and If-Range) to send,
// and the stored part the answer is to be joined to.
type partPlan struct {
	field string // the client's Range field
	ask   http.Header
	part  *store.Entry // joined to, when ask has If-Range
	sp    span
	want  httpcache.ByteRange // the client's range, when part is set
	have  bool                // part is set
}

// servePartial answers the request, a GET with a Range field for a key of
// which no complete response is stored, from the key's part or by a range
// fill. It returns false, having written nothing, to leave the request to
// the whole fill: the policy does not store parts, or the request is not
// one a part answers.
func (s *serving) servePartial() bool {
	r, p, req := s.r, s.p, s.dirs
	field := r.Header.Get("Range") // rangeOfPart holds
	part, sp, have := s.part(s.key)
	if have && (httpcache.Decide(part.Age(s.req.Now), part.Lifetime, part.Header, req, 0, p.Targeted...) != httpcache.UseFresh || s.unconfirmedEntry(part, s.req.Now)) {
		have = false // a stale part is replaced, never revalidated
	}
	if have && !httpcache.IfRangeHolds(r.Header, part.Header) {
		return false // the client asks for the whole of another version
	}
	plan := &partPlan{field: field, ask: http.Header{"Range": {field}}}
	if have {
		ranges, err := httpcache.ParseRange(field, sp.total)
		switch {
		case errors.Is(err, httpcache.ErrRangeInvalid):
			return false
		case errors.Is(err, httpcache.ErrRangeUnsatisfiable):
			s.answerPart(part, sp, nil)
			return true
		}
		inside := true
		for _, rg := range ranges {
			inside = inside && sp.covers(rg)
		}
		if inside {
			s.answerPart(part, sp, ranges)
			return true
		}
		if len(ranges) > 1 {
			return false // several ranges, not all stored: the whole object
		}
		// The missing bytes next to the part, to be joined to it, or the
		// client's range alone.
		want := ranges[0]
		end := want.Start + want.Length - 1
		plan.want = want
		plan.ask["Range"] = []string{fmt.Sprintf("bytes=%d-%d", want.Start, end)}
		if etag := strongETag(part.Header); etag != "" {
			switch {
			case want.Start >= sp.first && want.Start <= sp.last+1 && end > sp.last:
				plan.ask["Range"] = []string{fmt.Sprintf("bytes=%d-%d", sp.last+1, end)}
			case end <= sp.last && end+1 >= sp.first && want.Start < sp.first:
				plan.ask["Range"] = []string{fmt.Sprintf("bytes=%d-%d", want.Start, sp.first-1)}
			default:
				etag = "" // apart from the part: it is replaced
			}
			if etag != "" {
				plan.ask["If-Range"] = []string{etag}
				plan.part, plan.sp, plan.have = part, sp, true
			}
		}
	} else if strings.Contains(field, ",") {
		return false // several ranges of an object of unknown size
	}
	if req.Has("only-if-cached") {
		return false
	}
	s.answerFill(s.fill(plan))
	return true
}

// storePart stores and answers the origin's answer to the fill's range
// plan, unless it is a 200 (another version, or an origin that ignores
// ranges), which the fill stores whole. It reports whether it handed the
// response, and its release, to a goroutine storing it.
func (f *fill) storePart() (handed bool) {
	r, key, p, resp, requested, now, release := f.r, f.key, f.p, f.resp, f.requested, f.received, f.release
	pc, ok := f.partPiece()
	if !ok {
		return false
	}
	got, want, body, closePart := pc.got, pc.want, pc.body, pc.close
	total := got.total
	maxObject := f.maxObject(p)
	// The fields the policy says the origin varies on count as its Vary
	// (storable): a part varying on any is not stored, as none is.
	if f.req.Slice == nil {
		httpcache.AddImplicitVary(r, resp.Header, p.VaryBy, p.RegistryAware)
	}
	lifetime, storable := StoreLifetime(p, r, http.StatusOK, resp.Header, now, maxObject)
	storable = storable && got.last-got.first+1 <= maxObject &&
		len(httpcache.VaryFields(resp.Header)) == 0 && resp.Header.Get("Content-Encoding") == ""
	h := resp.Header.Clone()
	h.Del("Content-Length")
	e := &store.Entry{Key: PartKey(key), URL: purge.EntryURL(r), Status: http.StatusPartialContent, Header: h,
		Received: now, InitialAge: httpcache.InitialAge(h, requested, now), Lifetime: lifetime}
	whole := got.first == 0 && got.last == total-1
	if whole {
		h.Del("Content-Range")
		e.Key, e.Status = key, http.StatusOK
	} else {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", got.first, got.last, total))
	}
	var wr *store.Writer
	var rd io.ReadCloser
	if storable {
		var err error
		if wr, rd, err = f.cfg.Store.CreateRead(e, got.last-got.first+1, false, maxObject); err != nil {
			wr = nil // not admitted: answered unstored
		}
	}
	if wr == nil {
		defer closePart()
		f.out.Source = SourceOrigin
		f.answerFollowing(e, body, got, want, httpcache.CacheMiss)
		return false
	}
	f.cfg.Tasks.Go("partial fill", func() {
		defer release()
		defer closePart()
		n, err := reply.Copy(wr, body)
		f.cfg.Metrics.OriginBytes.Add(float64(n))
		if err == nil && n != got.last-got.first+1 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			f.cfg.Logger.Warn("partial response broke off; nothing stored", "key", f.keyShown(key), "err", errText(err))
			wr.Abort(err)
			return
		}
		if stored, err := wr.Commit(); err != nil {
			f.cfg.Logger.Warn("storing a partial response failed", "key", f.keyShown(key), "err", errText(err))
		} else if stored && whole {
			f.cfg.Store.Delete(PartKey(key)) // the whole object is stored now
		}
	})
	defer rd.Close()
	f.out.Source = SourceOrigin
	f.answerFollowing(wr.Entry(), rd, got, want, httpcache.CacheMiss)
	// The client's range may end before the stored span does: the answer
	// ends with the fill, so that the connection's next request sees the
	// part it stored.
	wr.Wait()
	return true
}

// piece is what an origin's range answer makes of a part: the span to
// store, the client's range in it, and the bytes to copy (close releases
// the stored part they are read from).
type piece struct {
	got   span
	want  httpcache.ByteRange
	body  io.Reader
	close func()
}

// partPiece checks the origin's answer to a part's range request and
// makes the piece it stores; ok false: the client is answered already.
func (f *fill) partPiece() (pc piece, ok bool) {
	w, resp, plan := f.w, f.resp, f.plan
	joined := plan.have
	if resp.StatusCode != http.StatusPartialContent {
		if joined {
			http.Error(w, "shardcache: origin answered a range request with "+strconv.Itoa(resp.StatusCode), http.StatusBadGateway)
			return pc, false
		}
		f.writeResponse(resp, true, httpcache.CacheMiss) // the origin's answer to the client's range
		return pc, false
	}
	first, last, total, ok := httpcache.ParseContentRange(resp.Header.Get("Content-Range"))
	if !ok || total < 0 || joined && (total != plan.sp.total || strongETag(resp.Header) != plan.ask.Get("If-Range")) {
		if joined {
			http.Error(w, "shardcache: origin's range is not a piece of the stored part", http.StatusBadGateway)
			return pc, false
		}
		f.writeResponse(resp, true, httpcache.CacheMiss) // a 206 no part can be made of
		return pc, false
	}
	want := plan.want
	if !joined {
		ranges, err := httpcache.ParseRange(plan.field, total)
		if err != nil || len(ranges) != 1 {
			f.writeResponse(resp, true, httpcache.CacheMiss)
			return pc, false
		}
		want = ranges[0]
	}
	// The span to store: the part and the piece (whose bytes the part has
	// already are skipped), or the piece alone.
	got := span{first, last, total}
	body := io.LimitReader(resp.Body, last-first+1)
	closePart := func() {}
	if joined {
		rd, done, err := f.readerAt(plan.part)
		if err != nil {
			http.Error(w, "shardcache: stored part unreadable", http.StatusBadGateway)
			return pc, false
		}
		closePart = done
		sp := plan.sp
		// The piece must reach the part: an origin that answers a shorter
		// range than asked (it caps its ranges) would otherwise have the
		// part's bytes joined at the wrong offset.
		if first < sp.first && last < sp.first-1 || first >= sp.first && first > sp.last+1 {
			closePart()
			http.Error(w, "shardcache: origin's range does not reach the stored part", http.StatusBadGateway)
			return pc, false
		}
		partBody := io.NewSectionReader(rd, 0, plan.part.Length)
		if first < sp.first { // the piece goes before the part
			body = io.MultiReader(io.LimitReader(resp.Body, sp.first-first), partBody)
			got = span{first, sp.last, total}
		} else {
			body = io.MultiReader(partBody, skipReader(resp.Body, sp.last+1-first, last-sp.last))
			got = span{sp.first, last, total}
		}
	}
	if !got.covers(want) {
		closePart()
		http.Error(w, "shardcache: origin's range does not hold the range asked for", http.StatusBadGateway)
		return pc, false
	}
	return piece{got: got, want: want, body: body, close: closePart}, true
}

// answerPart answers ranges of the request from part, whose span is sp; a
// 416 when ranges is nil.
func (s *serving) answerPart(part *store.Entry, sp span, ranges []httpcache.ByteRange) {
	w, r := s.w, s.r
	s.out.Served, s.out.Source = true, SourceDisk
	if part.InMemory() {
		s.out.Source = SourceMemory
	}
	if httpcache.NotModified(r.Method, r.Header, http.StatusOK, part.Header) {
		s.writeNotModified(part, httpcache.CacheHit)
		return
	}
	body, done, err := s.readerAt(part)
	if err != nil {
		http.Error(w, "shardcache: stored part unreadable", http.StatusBadGateway)
		return
	}
	defer done()
	h := w.Header()
	for k, v := range part.Header {
		h[k] = v
	}
	h.Del("Content-Range")
	h.Del("Content-Length")
	h["Accept-Ranges"] = acceptRangesBytes
	s.cacheHeaders(h, part, httpcache.CacheHit)
	section := func(start, length int64) io.Reader { return io.NewSectionReader(body, start-sp.first, length) }
	if err := writeRanges(w, r, part.Header, sp.total, ranges, section); err != nil && !reply.IsWriteError(err) {
		reply.BreakOff(w)
	}
}

// answerFollowing answers want, inside span got, with a 206 from rd, a
// reader of got's bytes as they are stored (or as they come).
func (s *serving) answerFollowing(e *store.Entry, rd io.Reader, got span, want httpcache.ByteRange, status string) {
	w := s.w
	if _, err := io.CopyN(io.Discard, rd, want.Start-got.first); err != nil {
		http.Error(w, "shardcache: origin response broke off", http.StatusBadGateway)
		return
	}
	first := make([]byte, min(32<<10, want.Length))
	k, err := io.ReadFull(rd, first)
	if err != nil && k == 0 {
		http.Error(w, "shardcache: origin response broke off", http.StatusBadGateway)
		return
	}
	h := w.Header()
	for k, v := range e.Header {
		h[k] = v
	}
	h.Set("Content-Range", want.ContentRange(got.total))
	h.Set("Content-Length", strconv.FormatInt(want.Length, 10))
	h["Accept-Ranges"] = acceptRangesBytes
	s.cacheHeaders(h, e, status)
	w.WriteHeader(http.StatusPartialContent)
	if _, err := w.Write(first[:k]); err != nil {
		return
	}
	if _, err := io.CopyN(w, rd, want.Length-int64(k)); err != nil {
		if !reply.IsWriteError(err) {
			reply.BreakOff(w) // the body broke off: do not end it cleanly
		}
		return
	}
	// The client has its range now, whatever the fill does next.
	http.NewResponseController(w).Flush()
}

// skipReader is r without its first skip bytes, then n bytes of it.
func skipReader(r io.Reader, skip, n int64) io.Reader {
	return io.MultiReader(&discardFirst{r: r, n: skip}, io.LimitReader(r, n))
}

// discardFirst reads and drops n bytes of r, then ends.
type discardFirst struct {
	r io.Reader
	n int64
}

func (d *discardFirst) Read([]byte) (int, error) {
	if d.n > 0 {
		if _, err := io.CopyN(io.Discard, d.r, d.n); err != nil {
			return 0, err
		}
		d.n = 0
	}
	return 0, io.EOF
}
