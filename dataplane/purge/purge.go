// Package purge holds a node's bans: the purges it has installed, indexed
// so that a lookup checks them in O(1), and kept on disk across restarts.
//
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
//
// The sweep (Sweep) sees the store through the small Index interface. The
// package imports httpcache, store, the wire types and sdk/policy.
package purge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// StateFile holds the applied purge revision and the bans in force.
const StateFile = "purges.json"

// Ban is one installed purge.
type Ban struct {
	p  *pb.Purge
	at int64 // when this node installed it, Unix nanoseconds
	// What it matches: url (host and request URI), key (and its
	// variants), tag, or host and prefix.
	url, key, tag, host, prefix string

	removed atomic.Int64
	swept   chan struct{}
}

// NewBan builds the ban of p, installed at at.
func NewBan(p *pb.Purge, at int64) (*Ban, error) {
	b := &Ban{p: p, at: at, swept: make(chan struct{})}
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
		// The host and the prefix as EntryURL has them.
		b.host, b.prefix = strings.ToLower(strings.TrimRight(p.GetHost(), ".")), policy.NormalEscapes(p.GetPathPrefix())
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
// case, no port) and its request URI, its escapes spelled as a request's
// are on arrival (policy.NormalEscapes).
func splitPurgeURL(raw string) (host, uri string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", "", fmt.Errorf("purge URL %q is not an absolute http or https URL", raw)
	}
	policy.NormalPath(u) // its raw path kept, as the request's is on arrival
	return policy.Host(&http.Request{Host: u.Host}), policy.NormalEscapes(u.RequestURI()), nil
}

// EntryURL is what an entry stored for r records as its URL.
func EntryURL(r *http.Request) string { return policy.Host(r) + r.URL.RequestURI() }

// Generated is when e's response was generated, as far as this node can
// tell: older than that by the age it had when it arrived.
func Generated(e *store.Entry) int64 { return e.Received.Add(-e.InitialAge).UnixNano() }

// Set is the set of bans in force, indexed so that a lookup costs O(1)
// in the common case: an object generated after the newest ban is checked
// with one atomic load; an older one with a map lookup for its URL, key
// and each of its tags, and two per distinct length of the prefix bans.
// Soft bans (Purge.soft) have an index of their own: they mark what they
// match stale, never unusable.
type Set struct {
	// Wake is signalled (without blocking) when bans are added, so that
	// a sweep starts.
	Wake   chan struct{}
	saving sync.Mutex // one save at a time

	mu         sync.RWMutex
	rev        int64  // highest purge revision applied
	list       []*Ban // in installation order
	hard, soft index
}

// index finds the bans that match an object without a scan of the bans.
type index struct {
	newest atomic.Int64 // at of the newest ban; 0 when there is none
	urls   map[string]*Ban
	keys   map[string]*Ban
	tags   map[string]*Ban
	// prefixes holds the newest ban per host and prefix (host "" for every
	// host), and prefixLens the distinct prefix lengths, so a lookup costs
	// two map lookups per distinct length, however many prefix bans.
	prefixes   map[string]*Ban
	prefixLens []int
}

// prefixKey is the prefixes map's key of a host and a path prefix.
func prefixKey(host, prefix string) string { return host + " " + prefix }

// New returns an empty set.
func New() *Set {
	s := &Set{Wake: make(chan struct{}, 1)}
	s.reindexLocked()
	return s
}

// Revision is the highest purge revision applied.
func (s *Set) Revision() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// Add installs b and records rev as applied.
func (s *Set) Add(b *Ban, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, b)
	s.indexOf(b).add(b)
	s.rev = max(s.rev, rev)
}

// Skip records rev as applied without a ban.
func (s *Set) Skip(rev int64) {
	s.mu.Lock()
	s.rev = max(s.rev, rev)
	s.mu.Unlock()
}

func (s *Set) indexOf(b *Ban) *index {
	if b.Soft() {
		return &s.soft
	}
	return &s.hard
}

func (x *index) add(b *Ban) {
	switch {
	case b.url != "":
		x.urls[b.url] = b
	case b.key != "":
		x.keys[b.key] = b
	case b.tag != "":
		x.tags[b.tag] = b
	default:
		x.prefixes[prefixKey(b.host, b.prefix)] = b
		if i, found := slices.BinarySearch(x.prefixLens, len(b.prefix)); !found {
			x.prefixLens = slices.Insert(x.prefixLens, i, len(b.prefix))
		}
	}
	x.newest.Store(max(x.newest.Load(), b.at))
}

func (x *index) reset() {
	x.urls, x.keys, x.tags, x.prefixes, x.prefixLens = map[string]*Ban{}, map[string]*Ban{}, map[string]*Ban{}, map[string]*Ban{}, nil
	x.newest.Store(0)
}

func (s *Set) reindexLocked() {
	s.hard.reset()
	s.soft.reset()
	for _, b := range s.list {
		s.indexOf(b).add(b)
	}
}

// Match returns a ban installed after e was generated that matches it and
// removes it, or nil. Soft bans are not among them (see Stale).
func (s *Set) Match(e *store.Entry) *Ban {
	g := Generated(e)
	if g >= s.hard.newest.Load() {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e.URL == "" {
		// Stored before entries kept their URL: any URL or prefix ban may
		// be for it.
		for i := len(s.list) - 1; i >= 0 && s.list[i].at > g; i-- {
			if b := s.list[i]; !b.Soft() && (b.url != "" || b.prefix != "") {
				return b
			}
		}
	}
	return s.hard.match(e, g)
}

// Stale returns a soft ban installed after e was received that matches
// it, or nil: e is then served as a stale response is, and revalidated.
// Received, not generated as for Match: a response's Date has a second's
// precision, and the refetch after a soft purge must not look older than
// the purge.
func (s *Set) Stale(e *store.Entry) *Ban {
	g := e.Received.UnixNano()
	if g >= s.soft.newest.Load() || e.URL == "" {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.soft.match(e, g)
}

// match is a ban of x newer than g (when e was generated) matching e.
func (x *index) match(e *store.Entry, g int64) *Ban {
	newer := func(b *Ban) bool { return b != nil && b.at > g }
	if b := x.urls[e.URL]; e.URL != "" && newer(b) {
		return b
	}
	if len(x.keys) > 0 {
		k := httpcache.URLKey(e.Key)
		if i := strings.Index(k, slice.Sep); i >= 0 {
			k = k[:i] // a slice of the object the key names
		}
		if b := x.keys[k]; newer(b) {
			return b
		}
	}
	var found *Ban
	if len(x.tags) > 0 && httpcache.EntryTags(e.Header, func(t string) bool {
		if b := x.tags[strings.ToLower(t)]; newer(b) {
			found = b
			return true
		}
		return false
	}) {
		return found
	}
	if len(x.prefixes) > 0 && e.URL != "" {
		i := strings.IndexByte(e.URL, '/')
		if i < 0 {
			return nil
		}
		host, uri := e.URL[:i], e.URL[i:]
		for _, n := range x.prefixLens {
			if n > len(uri) {
				break
			}
			if b := x.prefixes[prefixKey(host, uri[:n])]; newer(b) {
				return b
			}
			if b := x.prefixes[prefixKey("", uri[:n])]; newer(b) {
				return b
			}
		}
	}
	return nil
}

// Pending returns the bans not yet swept.
func (s *Set) Pending() []*Ban {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*Ban(nil), s.list...)
}

// Drop removes swept bans and closes their swept channels.
func (s *Set) Drop(swept []*Ban) {
	s.mu.Lock()
	gone := make(map[*Ban]bool, len(swept))
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

// persisted is the persisted form of a Set.
type persisted struct {
	Revision int64          `json:"revision"`
	Bans     []persistedBan `json:"bans"`
}

type persistedBan struct {
	Purge json.RawMessage `json:"purge"`
	At    int64           `json:"installed_unix_nano"`
}

// Save writes the applied revision and the bans to path atomically.
func (s *Set) Save(path string) error {
	s.saving.Lock()
	defer s.saving.Unlock()
	s.mu.RLock()
	st := persisted{Revision: s.rev, Bans: make([]persistedBan, 0, len(s.list))}
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

// Load reads what Save wrote; a missing file is a node that never applied
// a purge.
func (s *Set) Load(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st persisted
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
		b, err := NewBan(p, kept.At)
		if err != nil {
			return fmt.Errorf("purge state %s: %w", path, err)
		}
		s.list = append(s.list, b)
	}
	s.rev = st.Revision
	s.reindexLocked()
	return nil
}

// Purge is the purge b was built from.
func (b *Ban) Purge() *pb.Purge { return b.p }

// Key is the cache key b names exactly, "" when it names none.
func (b *Ban) Key() string { return b.key }

// URL is the host and request URI b names exactly, "" when it names none.
func (b *Ban) URL() string { return b.url }

// Removed counts the stored objects removed for b.
func (b *Ban) Removed() *atomic.Int64 { return &b.removed }

// Soft reports whether b marks what it matches stale instead of removing it.
func (b *Ban) Soft() bool { return b.p.GetSoft() }

// Swept is closed once b has been applied to every stored object.
func (b *Ban) Swept() <-chan struct{} { return b.swept }

// InstalledAt is when this node installed b, Unix nanoseconds.
func (b *Ban) InstalledAt() int64 { return b.at }
