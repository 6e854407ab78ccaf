package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Purges reach a node from the control plane in revision order. An exact
// purge deletes the URL's object at once; every purge also installs a ban,
// which lookups check, so nothing it matches is served again, and which a
// background sweep applies to every stored object (variants, and objects
// the key template stores under other keys). A ban matches objects whose
// response was generated before the node installed it (received time minus
// the age it had when received), so a response fetched after the purge is
// never taken for a purged one. A ban is dropped once a sweep that started
// after every fill older than it had finished has visited the whole store:
// no older object can match it then.
//
// The applied revision and the bans not yet dropped are kept in the data
// directory, so a restarted node neither serves what a ban still covers
// nor misses the purges issued while it was away: its hello carries the
// revision and the control plane sends every purge after it.

// purgeStateFile holds the applied purge revision and the bans in force.
const purgeStateFile = "purges.json"

// purgeAckWithin is how long a purge's result waits for the sweep to
// finish before it is sent with the count so far and sweeping set.
const purgeAckWithin = 2 * time.Second

// ban is one installed purge.
type ban struct {
	p  *pb.Purge
	at int64 // when this node installed it, Unix nanoseconds
	// What it matches: url (host and request URI), key (and its
	// variants), tag, or host and prefix.
	url, key, tag, host, prefix string

	removed atomic.Int64
	swept   chan struct{}
}

// newBan builds the ban of p, installed at at.
func newBan(p *pb.Purge, at int64) (*ban, error) {
	b := &ban{p: p, at: at, swept: make(chan struct{})}
	switch p.GetKind() {
	case pb.PurgeKind_PURGE_KIND_URL:
		if p.GetKey() != "" {
			b.key = p.GetKey()
			return b, nil
		}
		host, uri, err := splitPurgeURL(p.GetUrl())
		if err != nil {
			return nil, err
		}
		b.url = host + uri
	case pb.PurgeKind_PURGE_KIND_PREFIX:
		if !strings.HasPrefix(p.GetPathPrefix(), "/") {
			return nil, fmt.Errorf("path prefix %q does not start with /", p.GetPathPrefix())
		}
		b.host, b.prefix = strings.ToLower(p.GetHost()), p.GetPathPrefix()
	case pb.PurgeKind_PURGE_KIND_TAG:
		if p.GetTag() == "" {
			return nil, errors.New("empty tag")
		}
		b.tag = strings.ToLower(p.GetTag())
	default:
		return nil, fmt.Errorf("unknown purge kind %v", p.GetKind())
	}
	return b, nil
}

// splitPurgeURL returns an absolute URL's host as requests name it (lower
// case, no port) and its request URI.
func splitPurgeURL(raw string) (host, uri string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", "", fmt.Errorf("purge URL %q is not an absolute http or https URL", raw)
	}
	return policy.Host(&http.Request{Host: u.Host}), u.RequestURI(), nil
}

// entryURL is what an entry stored for r records as its URL.
func entryURL(r *http.Request) string { return policy.Host(r) + r.URL.RequestURI() }

// generated is when e's response was generated, as far as this node can
// tell: older than that by the age it had when it arrived.
func generated(e *store.Entry) int64 { return e.Received.Add(-e.InitialAge).UnixNano() }

// entryTags are the tags of a stored response: Surrogate-Key values
// separated by spaces, Cache-Tag values by commas.
func entryTags(h http.Header, fn func(tag string) bool) bool {
	for _, v := range h.Values("Surrogate-Key") {
		for t := range strings.FieldsSeq(v) {
			if fn(t) {
				return true
			}
		}
	}
	for _, v := range h.Values("Cache-Tag") {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" && fn(t) {
				return true
			}
		}
	}
	return false
}

// bans is the set of bans in force, indexed so that a lookup costs O(1)
// in the common case: an object generated after the newest ban is checked
// with one atomic load; an older one with a map lookup for its URL, key
// and each of its tags, and two per distinct length of the prefix bans.
type bans struct {
	newest atomic.Int64 // at of the newest ban; 0 when there is none
	wake   chan struct{}
	saving sync.Mutex // one save at a time

	mu   sync.RWMutex
	rev  int64  // highest purge revision applied
	list []*ban // in installation order
	urls map[string]*ban
	keys map[string]*ban
	tags map[string]*ban
	// prefixes holds the newest ban per host and prefix (host "" for every
	// host), and prefixLens the distinct prefix lengths, so a lookup costs
	// two map lookups per distinct length, however many prefix bans.
	prefixes   map[string]*ban
	prefixLens []int
}

// prefixKey is the prefixes map's key of a host and a path prefix.
func prefixKey(host, prefix string) string { return host + " " + prefix }

func newBans() *bans {
	s := &bans{wake: make(chan struct{}, 1)}
	s.reindexLocked()
	return s
}

// revision is the highest purge revision applied.
func (s *bans) revision() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// add installs b and records rev as applied.
func (s *bans) add(b *ban, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, b)
	s.indexLocked(b)
	s.rev = max(s.rev, rev)
}

// skip records rev as applied without a ban.
func (s *bans) skip(rev int64) {
	s.mu.Lock()
	s.rev = max(s.rev, rev)
	s.mu.Unlock()
}

func (s *bans) indexLocked(b *ban) {
	switch {
	case b.url != "":
		s.urls[b.url] = b
	case b.key != "":
		s.keys[b.key] = b
	case b.tag != "":
		s.tags[b.tag] = b
	default:
		s.prefixes[prefixKey(b.host, b.prefix)] = b
		if i, found := slices.BinarySearch(s.prefixLens, len(b.prefix)); !found {
			s.prefixLens = slices.Insert(s.prefixLens, i, len(b.prefix))
		}
	}
	s.newest.Store(max(s.newest.Load(), b.at))
}

func (s *bans) reindexLocked() {
	s.urls, s.keys, s.tags, s.prefixes, s.prefixLens = map[string]*ban{}, map[string]*ban{}, map[string]*ban{}, map[string]*ban{}, nil
	s.newest.Store(0)
	for _, b := range s.list {
		s.indexLocked(b)
	}
}

// match returns a ban installed after e was generated that matches it, or nil.
func (s *bans) match(e *store.Entry) *ban {
	g := generated(e)
	if g >= s.newest.Load() {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	newer := func(b *ban) bool { return b != nil && b.at > g }
	if e.URL == "" {
		// Stored before entries kept their URL: any URL or prefix ban may
		// be for it.
		for i := len(s.list) - 1; i >= 0 && s.list[i].at > g; i-- {
			if b := s.list[i]; b.url != "" || b.prefix != "" {
				return b
			}
		}
	} else if b := s.urls[e.URL]; newer(b) {
		return b
	}
	if len(s.keys) > 0 {
		k := httpcache.URLKey(e.Key)
		if b := s.keys[k]; newer(b) {
			return b
		}
	}
	var found *ban
	if len(s.tags) > 0 && entryTags(e.Header, func(t string) bool {
		if b := s.tags[strings.ToLower(t)]; newer(b) {
			found = b
			return true
		}
		return false
	}) {
		return found
	}
	if len(s.prefixes) > 0 && e.URL != "" {
		i := strings.IndexByte(e.URL, '/')
		if i < 0 {
			return nil
		}
		host, uri := e.URL[:i], e.URL[i:]
		for _, n := range s.prefixLens {
			if n > len(uri) {
				break
			}
			if b := s.prefixes[prefixKey(host, uri[:n])]; newer(b) {
				return b
			}
			if b := s.prefixes[prefixKey("", uri[:n])]; newer(b) {
				return b
			}
		}
	}
	return nil
}

// pending returns the bans not yet swept.
func (s *bans) pending() []*ban {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*ban(nil), s.list...)
}

// drop removes swept bans and closes their swept channels.
func (s *bans) drop(swept []*ban) {
	s.mu.Lock()
	gone := make(map[*ban]bool, len(swept))
	for _, b := range swept {
		gone[b] = true
		close(b.swept)
	}
	kept := s.list[:0]
	for _, b := range s.list {
		if !gone[b] {
			kept = append(kept, b)
		}
	}
	clear(s.list[len(kept):])
	s.list = kept
	s.reindexLocked()
	s.mu.Unlock()
}

// purgeState is the persisted form of bans.
type purgeState struct {
	Revision int64          `json:"revision"`
	Bans     []persistedBan `json:"bans"`
}

type persistedBan struct {
	Purge json.RawMessage `json:"purge"`
	At    int64           `json:"installed_unix_nano"`
}

// save writes the applied revision and the bans to path atomically.
func (s *bans) save(path string) error {
	s.saving.Lock()
	defer s.saving.Unlock()
	s.mu.RLock()
	st := purgeState{Revision: s.rev, Bans: make([]persistedBan, 0, len(s.list))}
	for _, b := range s.list {
		raw, err := protojson.Marshal(b.p)
		if err != nil {
			s.mu.RUnlock()
			return err
		}
		st.Bans = append(st.Bans, persistedBan{Purge: raw, At: b.at})
	}
	s.mu.RUnlock()
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// load reads what save wrote; a missing file is a node that never applied
// a purge.
func (s *bans) load(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st purgeState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("purge state %s: %w", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, kept := range st.Bans {
		p := &pb.Purge{}
		if err := protojson.Unmarshal(kept.Purge, p); err != nil {
			return fmt.Errorf("purge state %s: %w", path, err)
		}
		b, err := newBan(p, kept.At)
		if err != nil {
			return fmt.Errorf("purge state %s: %w", path, err)
		}
		s.list = append(s.list, b)
	}
	s.rev = st.Revision
	s.reindexLocked()
	return nil
}

// PurgeRevision is the highest purge revision this node has applied.
func (n *Node) PurgeRevision() int64 { return n.bans.revision() }

// ApplyPurges applies purges pushed by the control plane, in order, and
// reports each one's result: once the sweep has applied it to every stored
// object, or after purgeAckWithin with the count so far. Once it returns,
// nothing the purges match is served.
func (n *Node) ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult)) {
	var added []*ban
	for _, p := range ps {
		res := &pb.PurgeResult{NodeId: n.cfg.ID, PurgeId: p.GetId()}
		if p.GetRevision() <= n.bans.revision() {
			res.RevisionApplied = n.bans.revision()
			report(res) // applied before a reconnect; the result was lost
			continue
		}
		b, err := newBan(p, time.Now().UnixNano())
		if err != nil {
			// A purge this node cannot read must not hold back the ones after it.
			n.bans.skip(p.GetRevision())
			n.log.Error("cannot apply purge", "purge", p.GetId(), "err", err)
			res.RevisionApplied, res.Error = n.bans.revision(), err.Error()
			report(res)
			continue
		}
		n.bans.add(b, p.GetRevision())
		n.purgeNow(b)
		added = append(added, b)
	}
	if n.purgeFile != "" && len(ps) > 0 {
		if err := n.bans.save(n.purgeFile); err != nil {
			n.log.Error("saving purge state; a restart re-applies the purges", "err", err)
		}
	}
	n.caughtUp.Store(true)
	n.metrics.purgeRevision.Set(float64(n.bans.revision()))
	n.metrics.bans.Set(float64(len(n.bans.pending())))
	if len(added) == 0 {
		return
	}
	select {
	case n.bans.wake <- struct{}{}:
	default:
	}
	rev := n.bans.revision()
	for _, b := range added {
		n.metrics.purges.WithLabelValues(strings.ToLower(strings.TrimPrefix(b.p.GetKind().String(), "PURGE_KIND_"))).Inc()
		n.background("purge-report", func() {
			t := time.NewTimer(purgeAckWithin)
			defer t.Stop()
			res := &pb.PurgeResult{NodeId: n.cfg.ID, PurgeId: b.p.GetId(), RevisionApplied: rev}
			select {
			case <-b.swept:
			case <-t.C:
				res.Sweeping = true
			case <-n.fillCtx.Done():
				return // the node stops: no session is left to carry it
			}
			res.ObjectsRemoved = b.removed.Load()
			report(res)
		})
	}
}

// purgeNow removes at once what a ban names exactly, and the hot copies it
// may cover.
func (n *Node) purgeNow(b *ban) {
	var keys []string
	switch {
	case b.key != "":
		keys = []string{b.key}
	case b.url != "":
		i := strings.IndexByte(b.url, '/')
		r := &http.Request{Method: http.MethodGet, Host: b.url[:i], Header: http.Header{}}
		var err error
		if r.URL, err = url.ParseRequestURI(b.url[i:]); err != nil {
			return
		}
		p := n.policies.Load().Match(b.url[:i], r.URL.Path)
		keys = []string{p.Key("http", r), p.Key("https", r)}
	default:
		if n.hotCopies != nil {
			n.hotCopies.Clear()
		}
		return
	}
	for _, k := range keys {
		if e, ok := n.store.Peek(k); ok && n.store.Delete(k) {
			b.removed.Add(1)
			if e.Status == varyMarker {
				n.variants.Delete(k)
			}
		}
		if n.hotCopies != nil {
			n.hotCopies.Delete(k)
		}
	}
}

// usable reports whether a stored entry may be served: no ban matches it,
// and, until the first session of this run has brought the purges the
// node missed, it was stored by this run.
func (n *Node) usable(e *store.Entry) bool {
	if !n.caughtUp.Load() && e.Received.Before(n.started) {
		return false
	}
	return n.bans.match(e) == nil
}

// sweepBans applies the bans to every stored object, until ctx ends.
func (n *Node) sweepBans(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.bans.wake:
		}
		pending := n.bans.pending()
		if len(pending) == 0 {
			continue
		}
		// Fills that began before the newest ban store objects it matches:
		// the sweep starts once they are done.
		newest := pending[len(pending)-1].at
		for n.inflight.startedBefore(newest) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		n.store.Keys(func(k string) bool {
			if e, ok := n.store.Peek(k); ok {
				if b := n.bans.match(e); b != nil && n.store.Delete(k) {
					b.removed.Add(1)
					if e.Status == varyMarker {
						n.variants.Delete(k)
					}
				}
			}
			return ctx.Err() == nil
		})
		if ctx.Err() != nil {
			return
		}
		n.bans.drop(pending)
		n.metrics.bans.Set(float64(len(n.bans.pending())))
		if n.purgeFile != "" {
			if err := n.bans.save(n.purgeFile); err != nil {
				n.log.Error("saving purge state", "err", err)
			}
		}
		var removed int64
		for _, b := range pending {
			removed += b.removed.Load()
		}
		n.log.Info("purges swept", "purges", len(pending), "objects_removed", removed, "revision", n.bans.revision())
	}
}

// peerBehind reports whether a peer's answer comes from a node that had
// applied fewer purges than this one, and removes the marker.
func (n *Node) peerBehind(h http.Header) bool {
	v := h.Get(relay.PurgeRevisionHeader)
	h.Del(relay.PurgeRevisionHeader)
	rev, err := strconv.ParseInt(v, 10, 64)
	return err != nil || rev < n.bans.revision()
}

// inflight tracks when the fills running now began.
type inflight struct {
	mu     sync.Mutex
	next   uint64
	active map[uint64]int64
}

// begin records a fill starting now; the returned function ends it.
func (f *inflight) begin() func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active == nil {
		f.active = map[uint64]int64{}
	}
	id := f.next
	f.next++
	f.active[id] = time.Now().UnixNano()
	return func() {
		f.mu.Lock()
		delete(f.active, id)
		f.mu.Unlock()
	}
}

// startedBefore reports whether a fill that began before t still runs.
func (f *inflight) startedBefore(t int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.active {
		if s < t {
			return true
		}
	}
	return false
}

// restorePurges loads the purge state kept in dir.
func (n *Node) restorePurges(dir string) error {
	n.purgeFile = filepath.Join(dir, purgeStateFile)
	if err := n.bans.load(n.purgeFile); err != nil {
		return err
	}
	if len(n.bans.pending()) > 0 {
		n.bans.wake <- struct{}{}
	}
	return nil
}
