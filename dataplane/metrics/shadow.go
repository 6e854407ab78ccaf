package metrics

import (
	"container/list"
	"sync"
	"time"
)

// Shadow estimates, from live traffic, how a cache of the node's own size
// that kept everything its clients asked for by itself (nginx proxy_cache
// on each node, no sharding) would have done: the requests it would have
// served without the origin. Against the cluster's real origin requests
// and peer bytes, that is what sharding saves or costs.
//
// It simulates an LRU cache of the node's capacity over a spatial sample of
// keys, as SHARDS does (Waldspurger et al., FAST '15): a key is tracked
// when its hash falls under a threshold, the simulated capacity is scaled
// by the sampled share, and the sample's hit ratio is applied to every
// request. It starts by tracking every key; when more
// than MaxTracked are tracked it halves the share and forgets the keys that
// fall out, so its memory stays bounded (about 100 bytes a tracked key).
type Shadow struct {
	capacity int64 // bytes, unscaled
	max      int

	mu       sync.Mutex
	shift    uint  // share tracked = 1 / 2^shift
	used     int64 // bytes of tracked keys
	lru      *list.List
	entries  map[uint64]*list.Element
	requests uint64 // every observed request
	// Requests for tracked keys and their hits, each weighted by the
	// inverse of the share tracked when it came, so that the time before
	// the share was lowered does not weigh more than after.
	sampled, hits float64
}

type shadowEntry struct {
	hash    uint64
	size    int64
	expires time.Time // when the stored response stops being fresh
}

// MaxTracked bounds the keys the shadow tracks.
const MaxTracked = 100_000

// NewShadow estimates for a cache of capacity bytes, tracking at most max
// keys.
func NewShadow(capacity int64, max int) *Shadow {
	return &Shadow{capacity: capacity, max: max, lru: list.New(), entries: map[uint64]*list.Element{}}
}

// tracks reports whether h is in the tracked share: its top shift bits
// are zero.
func (s *Shadow) tracks(h uint64) bool { return s.shift == 0 || h>>(64-s.shift) == 0 }

// Observe counts a request for key, as the real store judged it: a
// response the store may keep (storable) of size bytes (-1 when the answer
// did not say: a 304, or a HEAD without Content-Length), fresh for ttl. A
// local-only cache would have served it without the origin if it held the
// key still fresh; it then keeps what a real store would. now is the
// request's time (its arrival): the clock is not read again.
func (s *Shadow) Observe(key string, size int64, ttl time.Duration, storable bool, now time.Time) {
	h := keyHash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if !s.tracks(h) {
		return
	}
	weight := float64(uint64(1) << s.shift)
	s.sampled += weight
	el, ok := s.entries[h]
	switch {
	case ok && now.Before(el.Value.(*shadowEntry).expires):
		s.hits += weight // fresh: served without the origin
	case !storable:
		if ok {
			s.removeLocked(el) // the store would not keep this one
		}
		return
	}
	if ok {
		e := el.Value.(*shadowEntry)
		if size >= 0 {
			s.used += size - e.size
			e.size = size
		}
		if storable {
			e.expires = now.Add(ttl)
		}
		s.lru.MoveToFront(el)
	} else {
		size = max(size, 0)
		s.entries[h] = s.lru.PushFront(&shadowEntry{hash: h, size: size, expires: now.Add(ttl)})
		s.used += size
	}
	// The sample holds 1/2^shift of the keys: it gets that share of the room.
	for s.used > s.capacity>>s.shift && s.lru.Len() > 0 {
		s.removeLocked(s.lru.Back())
	}
	for len(s.entries) > s.max {
		s.shift++
		for el := s.lru.Front(); el != nil; {
			next := el.Next()
			if !s.tracks(el.Value.(*shadowEntry).hash) {
				s.removeLocked(el)
			}
			el = next
		}
	}
}

// keyHash is FNV-1a with a 64-bit finalizer (SplitMix64's), so that the
// top bits sampling looks at are well mixed; fixed, so estimates repeat.
func keyHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

func (s *Shadow) removeLocked(el *list.Element) {
	e := s.lru.Remove(el).(*shadowEntry)
	delete(s.entries, e.hash)
	s.used -= e.size
}

// Totals are the requests observed and the estimate of those the
// local-only cache would have hit.
func (s *Shadow) Totals() (requests, hits float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sampled == 0 {
		return float64(s.requests), 0
	}
	return float64(s.requests), float64(s.requests) * s.hits / s.sampled
}
