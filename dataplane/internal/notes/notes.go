// Package notes is the owner's bounded table of notes: per key, the last
// answer that was not a plain hit and why, and what removed a stored
// response (a purge, an invalidation). The ops listener's inspect shows
// them ("why was this a MISS?"), and a lookup that finds nothing says the
// key was purged rather than never stored. The table keeps the Max keys
// noted last, of at most MaxKey bytes each: a bounded memory, whatever the
// traffic. A hit writes none.
package notes

import (
	"sync"
	"time"
)

// Note is what the owner last did with a key other than a plain hit.
type Note struct {
	Cache  string    // the X-Cache value answered with; "" for a removal
	Reason string    // the rule that decided (httpcache.Reason*)
	Status int       // the answer's status; 0 for a removal
	Stored bool      // the answer was stored
	At     time.Time // when
}

const (
	// Max is how many keys the table holds notes of.
	Max = 4096
	// MaxKey is the longest key noted: a longer one is not.
	MaxKey = 1024
)

// Table holds the notes of the Max keys noted last: a map, and the keys in
// the order noted, the oldest replaced first. The zero value is ready to
// use.
type Table struct {
	mu    sync.Mutex
	m     map[string]Note
	order []string
	next  int
}

// Add notes note for key, replacing the oldest key's when the table is
// full.
func (t *Table) Add(key string, note Note) {
	if len(key) > MaxKey || key == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]Note)
	}
	if _, ok := t.m[key]; !ok {
		if len(t.order) < Max {
			t.order = append(t.order, key)
		} else {
			delete(t.m, t.order[t.next])
			t.order[t.next] = key
			t.next = (t.next + 1) % Max
		}
	}
	t.m[key] = note
}

// Get is key's note.
func (t *Table) Get(key string) (Note, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	note, ok := t.m[key]
	return note, ok
}

// Removed notes that key's stored response was removed, and why.
func (t *Table) Removed(key, reason string) {
	t.Add(key, Note{Reason: reason, At: time.Now()})
}

// MissReason is why a lookup of key found nothing: the reason it was
// removed (purged, invalidated) since it was stored, else otherwise (no
// stored response).
func (t *Table) MissReason(key, otherwise string) string {
	if note, ok := t.Get(key); ok && note.Cache == "" {
		return note.Reason
	}
	return otherwise
}
