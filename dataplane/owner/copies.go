package owner

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/store"
)

// Hot copies. A node that does not own a hot key keeps a copy of the
// owner's answer in memory (Keep), and answers from it while it is fresh
// as the request asks (a Copy request), so that the hot key stops paying
// the relay hop. A copy is kept only of an answer that is the same for
// every client, small, storable, and from an owner that is not behind this
// node's purges.

// copyOverhead is about what a copy costs besides its body, as the
// copies count it (store.Entry.Cost).
const copyOverhead = 512

// staleAnswer is the X-Cache of a peer's answer that it served stale
// (STALE, or UPDATING while it revalidates), "" for any other.
func staleAnswer(h http.Header) string {
	if x := h.Get("X-Cache"); x == httpcache.CacheStale || x == httpcache.CacheUpdating {
		return x
	}
	return ""
}

// HasCopy reports whether this node holds a copy of key.
func (o *Owner) HasCopy(key string) bool {
	if o.cfg.Copies == nil {
		return false
	}
	_, ok := o.cfg.Copies.Get(key)
	return ok
}

// serveCopy answers from this node's copy of the key, when there is one,
// no purge matches it, it was confirmed since a cut-off from the control
// plane, and the request takes it as fresh (its no-cache, max-age and
// min-fresh obeyed as for a stored response). Else it writes nothing.
func (s *serving) serveCopy() {
	if s.cfg.Copies == nil {
		return
	}
	e, ok := s.cfg.Copies.Get(s.key)
	if !ok || !s.usable(e) || s.unconfirmedEntry(e, s.req.Now) {
		return
	}
	if s.cfg.Bans.Stale(e) != nil {
		// Soft-purged: the owner serves it stale while it revalidates;
		// a copy has nothing to revalidate with, so it goes.
		s.cfg.Copies.Delete(s.key)
		return
	}
	if httpcache.Decide(e.Age(s.req.Now), e.Lifetime, e.Header, s.dirs, 0, s.p.Targeted...) != httpcache.UseFresh {
		return
	}
	s.cfg.Metrics.CopyHits.Inc()
	s.out.Served = true
	s.Answer(e, nil, httpcache.CacheHit)
}

// Keep answers req from resp, the owner's answer to it relayed, keeping a
// copy when the answer may be copied and req's key is hot here, or the
// copies have room for it without an eviction: so that a working set
// that fits is local after one relay per key, not once its keys turn
// hot. (Once the copies are full, only hot keys' answers are offered,
// and the copies' admission keeps the most asked for.) The owner's purge
// revision is read off resp either way. It reports false, having written
// nothing and read no body, when it keeps no copy.
func (o *Owner) Keep(w http.ResponseWriter, req Request, resp *http.Response, hot bool) bool {
	behind := o.cfg.Bans.Behind(hop.PurgeRevision(resp.Header))
	if o.cfg.Copies == nil || behind || req.HTTP.Method != http.MethodGet || req.Policy.AuthorizeEach {
		return false
	}
	// What answered a range (206, or a 416 with the object's freshness)
	// answers that range only, and what the owner served stale (soft
	// purged, or while it revalidates) is no fresh copy: neither is kept.
	if req.HTTP.Header.Get("Range") != "" || staleAnswer(resp.Header) != "" {
		return false
	}
	if !hot && (resp.ContentLength < 0 || !o.cfg.Copies.Room(resp.ContentLength+copyOverhead)) {
		return false
	}
	lifetime, ok := StoreLifetime(req.Policy, req.HTTP, resp.StatusCode, resp.Header, req.Now, o.cfg.CopyMaxObject)
	// A copy is kept only of an answer that is the same for every client:
	// one negotiated (Vary, on any of its lines) or coded is not. And only
	// of one the owner has in its store (its Cache-Status member says hit
	// or stored): an answer it made itself (a 504 to only-if-cached, a 502
	// for an unreachable origin) is no object, whatever a policy's TTL.
	if !ok || resp.ContentLength < 0 || resp.ContentLength > o.cfg.CopyMaxObject || len(httpcache.VaryFields(resp.Header)) > 0 ||
		slices.ContainsFunc(resp.Header.Values("Content-Encoding"), func(v string) bool { return strings.TrimSpace(v) != "" }) {
		return false
	}
	if !ownerHolds(resp.Header) {
		return false
	}
	// Read into one buffer of the announced length (at most CopyMaxObject),
	// not grown by doubling as io.ReadAll would.
	body := make([]byte, resp.ContentLength)
	n, err := io.ReadFull(resp.Body, body)
	if body = body[:n]; err != nil {
		// The owner's answer broke off: pass on what came, as a plain relay would.
		reply.CopyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
		return true
	}
	o.cfg.Metrics.Totals.PeerBytes.Add(uint64(len(body)))
	o.cfg.Metrics.PeerBytes.WithLabelValues("in").Add(float64(len(body)))
	kept := resp.Header.Clone()
	kept.Del("Cache-Status") // the copy answers with this node's own
	received := req.Now
	e := &store.Entry{Key: req.Key, URL: purge.EntryURL(req.HTTP), Status: resp.StatusCode, Header: kept, Body: body, Received: received,
		InitialAge: httpcache.InitialAge(resp.Header, received, received), Lifetime: lifetime, Size: int64(len(body)), Length: int64(len(body))}
	if o.cfg.Copies.Set(e) {
		o.cfg.Metrics.Hot.WithLabelValues("copy_admitted").Inc()
	}
	// Answer as the owner did (its X-Cache and X-Cache-Node), not as a copy.
	reply.CopyHeader(w.Header(), resp.Header)
	w.Header()["Cache-Status"] = append(w.Header()["Cache-Status"], httpcache.RelayedMember(o.statusName))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
	return true
}

// ownerHolds reports whether the owner's answer, with header h, is an
// object it holds: its own Cache-Status member says hit or stored.
func ownerHolds(h http.Header) bool {
	m, named := httpcache.MemberOf(h["Cache-Status"], h.Get("X-Cache-Node"))
	_, hit := m["hit"]
	_, stored := m["stored"]
	return named && (hit || stored)
}
