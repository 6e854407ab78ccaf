// Package store holds cached HTTP responses in two tiers: a ristretto memory
// tier for small objects over a persistent disk tier. The disk tier is one
// data file of large segments, written in sequence per stripe of the key
// hash through a write buffer, with a compact index in memory (no file per
// object); whole segments are reclaimed in order, and the objects of a
// reclaimed segment read since they were written are rewritten forward.
// Objects stream in through a Writer and become visible only when
// complete; a record on disk carries its key and checksums, so a crash or
// a flipped bit never leaves a torn or wrong object that is later served.
// New objects wait in memory on probation until their second use, and the
// disk tier admits by frequency (TinyLFU) once full. It imports
// internal/sketch and nothing else of the data plane.
package store

import (
	"net/http"
	"sync/atomic"
	"time"
	"unsafe"
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

	ref *recRef // the entry's record on disk, nil if none
	// verified is set when the body's checksum was checked as it was read.
	verified bool
	// head is what Head built from Header (a *headCache, read and
	// written atomically: readers share the entry).
	head unsafe.Pointer
}

// headCache is a product of Header, with the map it was made from: a copy
// of the entry with another header does not take it.
type headCache struct {
	hdr unsafe.Pointer
	v   any
}

// Head returns what build makes of e's Header, made once for an entry held
// in memory and shared by the answers from it (the owner serialises the
// stored fields that every answer repeats). An entry read from disk for
// one answer is not worth keeping it for: build runs each time. One
// caller's build only: the product is cached whatever the function.
func (e *Entry) Head(build func(http.Header) any) any {
	if e.Body == nil {
		return build(e.Header)
	}
	hdr := *(*unsafe.Pointer)(unsafe.Pointer(&e.Header))
	if c := (*headCache)(atomic.LoadPointer(&e.head)); c != nil && c.hdr == hdr {
		return c.v
	}
	v := build(e.Header)
	atomic.StorePointer(&e.head, unsafe.Pointer(&headCache{hdr: hdr, v: v}))
	return v
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
