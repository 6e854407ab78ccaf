package dataplane

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Slices. Under a policy with a slice size, an object is fetched from the
// origin and stored as fixed-size slices: slice i holds bytes [i*size,
// (i+1)*size) and is stored under its own key (the object's key, sliceSep,
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
const (
	// sliceSep separates an object's key from its slice's size and index.
	sliceSep = "\x1fslice\x1f"
	// sliceWindow is how many slices an answer asks for ahead of the one it
	// is sending. Memory stays bounded by the peer hop's flow control:
	// each slice asked ahead holds at most one HTTP/2 stream window.
	sliceWindow = 4
)

// sliceReq names one slice of an object.
type sliceReq struct {
	index, size int64
	// version is the object version the slice must belong to; "" for the
	// head, which decides it.
	version string
}

func (s *sliceReq) start() int64 { return s.index * s.size }

// last is the offset of the slice's last byte in an object of total bytes.
func (s *sliceReq) last(total int64) int64 { return min(s.start()+s.size, total) - 1 }

// key is the slice's cache key.
func (s *sliceReq) key(object string) string {
	return object + sliceSep + strconv.FormatInt(s.size, 10) + ":" + strconv.FormatInt(s.index, 10)
}

// setHeader marks a peer request as asking for s.
func (s *sliceReq) setHeader(h http.Header) {
	h.Set(relay.SliceHeader, strconv.FormatInt(s.index, 10)+"/"+strconv.FormatInt(s.size, 10))
	if s.version != "" {
		h.Set(relay.SliceVersionHeader, s.version)
	} else {
		h.Del(relay.SliceVersionHeader)
	}
}

// parseSliceHeader reads the slice a peer request asks for; nil when it
// asks for a whole object.
func parseSliceHeader(h http.Header) (*sliceReq, error) {
	v := h.Get(relay.SliceHeader)
	if v == "" {
		return nil, nil
	}
	i, sz, ok := strings.Cut(v, "/")
	index, err1 := strconv.ParseInt(i, 10, 64)
	size, err2 := strconv.ParseInt(sz, 10, 64)
	if !ok || err1 != nil || err2 != nil || index < 0 || size < policy.MinSliceSize || index > math.MaxInt64/size {
		return nil, fmt.Errorf("bad %s %q: want <index>/<size>, size at least %d", relay.SliceHeader, v, policy.MinSliceSize)
	}
	return &sliceReq{index: index, size: size, version: h.Get(relay.SliceVersionHeader)}, nil
}

// originHeader is what a slice's origin request adds: its byte range,
// conditional on the object's version, of the unencoded representation.
func (s *sliceReq) originHeader() http.Header {
	h := http.Header{
		"Range":           {fmt.Sprintf("bytes=%d-%d", s.start(), s.start()+s.size-1)},
		"Accept-Encoding": {"identity"},
	}
	if s.version != "" {
		h.Set("If-Range", s.version)
	}
	return h
}

// fromOrigin turns the origin's answer to s's Range request into the slice
// to store, in place: a 206 of exactly the slice's bytes, with the total
// size in its Content-Range. An origin that ignores Range (200) is read up
// to the slice and cut to it. The head may also be any other answer (an
// error, a redirect, an object of unknown length), which is then the
// object's answer as a whole. errSliceChanged means the origin sent
// another version than s asked for.
func (s *sliceReq) fromOrigin(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, end, total, ok := httpcache.ParseContentRange(resp.Header.Get("Content-Range"))
		if !ok || total < 0 || start != s.start() || end != s.last(total) {
			return fmt.Errorf("slice %d: origin answered range %q, want bytes %d-%d", s.index, resp.Header.Get("Content-Range"), s.start(), s.start()+s.size-1)
		}
		if s.version != "" && objectVersion(resp.Header) != s.version {
			return errSliceChanged
		}
		resp.ContentLength = end - start + 1
		resp.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		return nil
	case http.StatusOK:
		if s.version != "" && objectVersion(resp.Header) != s.version {
			return errSliceChanged // If-Range failed: the whole new version came
		}
		total := resp.ContentLength
		if total < 0 {
			if s.index == 0 {
				return nil // unknown length: kept whole, or passed on
			}
			return fmt.Errorf("slice %d: origin ignores Range and sends no length", s.index)
		}
		if total == 0 && s.index == 0 {
			return nil // an empty object is kept whole
		}
		if s.start() >= total {
			return fmt.Errorf("slice %d: starts past the object's %d bytes", s.index, total)
		}
		if _, err := io.CopyN(io.Discard, resp.Body, s.start()); err != nil {
			return fmt.Errorf("slice %d: origin body broke off before the slice: %w", s.index, err)
		}
		length := min(s.size, total-s.start())
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, length), resp.Body}
		resp.StatusCode, resp.ContentLength = http.StatusPartialContent, length
		resp.Header.Set("Content-Range", httpcache.ByteRange{Start: s.start(), Length: length}.ContentRange(total))
		resp.Header.Set("Content-Length", strconv.FormatInt(length, 10))
		return nil
	}
	if s.index == 0 && resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && resp.Header.Get("Content-Range") == "bytes */0" {
		// An empty object has no first slice: it is kept whole, as a 200.
		resp.Body.Close()
		resp.Body, resp.StatusCode, resp.ContentLength = http.NoBody, http.StatusOK, 0
		resp.Header.Del("Content-Range")
		resp.Header.Set("Content-Length", "0")
		return nil
	}
	if s.index == 0 {
		return nil
	}
	return fmt.Errorf("slice %d: origin answered %d", s.index, resp.StatusCode)
}

// sliceVary reports whether a slice with header h may be stored: it may
// vary by content coding (slices are fetched unencoded, so one slice
// serves every client) but by nothing else.
func sliceVary(h http.Header) bool {
	fields := httpcache.VaryFields(h)
	if len(fields) > 0 && !slices.Equal(fields, []string{"accept-encoding"}) {
		return false
	}
	h.Del("Vary") // a marker-less varying entry would not be looked up
	return true
}

// objectVersion is the validator that ties an object's slices together:
// its strong ETag, else its Last-Modified; "" when it has neither.
func objectVersion(h http.Header) string {
	if et := h.Get("Etag"); et != "" && !strings.HasPrefix(et, "W/") {
		return et
	}
	return h.Get("Last-Modified")
}

// sliceOwner is the member to ask for slice s of the object under key;
// nil when this node serves it itself.
func (n *Node) sliceOwner(key string, s *sliceReq, p *policy.Policy) *pb.Member {
	rt := n.routes.Load()
	if rt == nil || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		return nil
	}
	o := rt.owner(s.key(key))
	if o == nil || o.GetId() == n.cfg.ID {
		return nil
	}
	return o
}

// fetchSlice asks slice s's owner for it (method GET or HEAD), or serves
// it in process when this node owns it or the owner cannot be reached.
func (n *Node) fetchSlice(ctx context.Context, r *http.Request, key string, p *policy.Policy, s *sliceReq, method string) *http.Response {
	h := n.relayHeader(r)
	for _, f := range httpcache.ConditionalFields {
		h.Del(f) // the assembling node answers those
	}
	s.setHeader(h)
	req := (&http.Request{Method: method, URL: r.URL, Host: r.Host, Header: h}).WithContext(ctx)
	if owner := n.sliceOwner(key, s, p); owner != nil {
		// The relay timeout bounds the wait for the answer's header; the
		// body is read at the client's pace.
		resp, err := n.forward(ctx, owner, req, h, n.relayTimeout(p))
		if err == nil {
			return resp
		}
		if ctx.Err() == nil {
			n.log.Warn("slice owner did not answer; serving the slice here", "owner", owner.GetId(), "slice", s.index, "err", err)
		}
	}
	return n.inProcess(req)
}

// dropSlice removes slice s of the object under key from its owner, so
// that the next request fetches it anew.
func (n *Node) dropSlice(r *http.Request, key string, p *policy.Policy, s *sliceReq) {
	owner := n.sliceOwner(key, s, p)
	if owner == nil {
		n.store.Delete(s.key(key))
		return
	}
	ctx, cancel := context.WithTimeout(n.fillCtx, 2*time.Second)
	defer cancel()
	h := http.Header{relay.HopHeader: {n.cfg.ID}, relay.InvalidateHeader: {"1"}, relay.SchemeHeader: {"http"}}
	s.setHeader(h)
	req := &http.Request{Method: http.MethodGet, URL: r.URL, Host: r.Host, Header: h}
	if resp, err := n.peers.Forward(ctx, owner.GetPeerAddress(), req, h); err == nil {
		resp.Body.Close()
	} else {
		n.log.Warn("could not drop a changed object's head", "owner", owner.GetId(), "err", err)
	}
}
