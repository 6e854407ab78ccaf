// Package store holds cached HTTP responses. This is the memory tier, a
// ristretto cache sized in bytes; the disk tier sits below it.
package store

import (
	"net/http"
	"time"
)

// Entry is one stored response. An Entry is immutable once stored: readers
// share it without locks.
type Entry struct {
	// Key is the cache key the entry was stored under.
	Key    string
	Status int
	// Header is the response header as received, minus hop-by-hop fields.
	Header http.Header
	Body   []byte
	// Received is when the response arrived from the origin.
	Received time.Time
	// InitialAge is the age the response already had when received.
	InitialAge time.Duration
	// Lifetime is how long the response stays fresh from its Date.
	Lifetime time.Duration
}

// Age is the entry's current age (RFC 9111 4.2.3).
func (e *Entry) Age(now time.Time) time.Duration {
	return e.InitialAge + max(now.Sub(e.Received), 0)
}

// Fresh reports whether the entry may be served without revalidation.
func (e *Entry) Fresh(now time.Time) bool { return e.Age(now) < e.Lifetime }

// Size approximates the bytes the entry holds, its cost in the memory tier.
func (e *Entry) Size() int64 {
	n := int64(len(e.Key) + len(e.Body) + 64)
	for k, vs := range e.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	return n
}
