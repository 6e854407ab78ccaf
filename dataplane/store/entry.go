// Package store holds cached HTTP responses in two tiers: a ristretto memory
// tier for small objects over a persistent disk tier that holds every
// object. Objects stream in through a Writer and become visible only when
// complete; a record on disk carries checksums, so a crash never leaves a
// torn object that is later served. Both tiers admit by frequency
// (TinyLFU): the disk tier counts lookups in a hotkey sketch of its own
// and stores a new object that needs room only if it is asked for at least
// as often as what it would evict. It imports hotkey and nothing else of
// the data plane.
package store

import (
	"net/http"
	"time"
)

// Entry is one stored response. An Entry is immutable once stored: readers
// share it without locks.
type Entry struct {
	// Key is the cache key the entry was stored under.
	Key string
	// URL is the request's host (lower case, no port) followed by its
	// request URI: what purges by URL and prefix match, whatever the key
	// template. Empty for records written before it was kept.
	URL    string
	Status int
	// Header is the response header as received, minus hop-by-hop fields.
	// When the store compressed the body, Header still describes the
	// identity representation (no Content-Encoding of the store's own).
	Header http.Header
	// Received is when the response arrived from the origin.
	Received time.Time
	// InitialAge is the age the response already had when received.
	InitialAge time.Duration
	// Lifetime is how long the response stays fresh from its Date.
	Lifetime time.Duration
	// Coding is the content coding the store applied to the body ("zstd"),
	// or "" when the body is stored as the origin sent it.
	Coding string
	// Size is the length of the stored body: coded when Coding is set.
	Size int64
	// Length is the length of the body as the origin sent it, -1 if not
	// known yet (an object still streaming in).
	Length int64
	// Body is the stored body when the entry is held in memory; nil for an
	// object read from disk with Store.Open.
	Body []byte

	disk *diskEntry // the entry's record on disk, nil if none
	off  int64      // the body's offset in the record file
}

// Age is the entry's current age (RFC 9111 4.2.3).
func (e *Entry) Age(now time.Time) time.Duration {
	return e.InitialAge + max(now.Sub(e.Received), 0)
}

// Fresh reports whether the entry may be served without revalidation.
func (e *Entry) Fresh(now time.Time) bool { return e.Age(now) < e.Lifetime }

// InMemory reports whether the body is held in Body.
func (e *Entry) InMemory() bool { return e.Body != nil || e.Size == 0 }

// Cost approximates the bytes the entry holds in memory, its cost in the
// memory tier.
func (e *Entry) Cost() int64 {
	n := int64(len(e.Key) + len(e.Body) + 96)
	for k, vs := range e.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	return n
}

// touch notes a use of the entry's disk record, for eviction.
func (e *Entry) touch() {
	if d := e.disk; d != nil {
		d.access.Store(clock())
	}
}

// clock is the access time recorded for eviction: Unix nanoseconds, so a
// record's modification time stands in for it after a restart.
func clock() int64 { return time.Now().UnixNano() }
