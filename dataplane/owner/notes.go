package owner

import (
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/store"
)

// Notes: per key, the last answer that was not a plain hit and why, and
// what removed a stored response (a purge, an invalidation). inspect
// shows them ("why was this a MISS?"), and a lookup that finds nothing
// says the key was purged rather than never stored. They are kept for the
// maxNotes keys noted last, of at most maxNoteKey bytes each: a bounded
// memory, whatever the traffic. A hit writes none.

// Note is what the owner last did with a key other than a plain hit.
type Note struct {
	Cache  string    // the X-Cache value answered with; "" for a removal
	Reason string    // the rule that decided (httpcache.Reason*)
	Status int       // the answer's status; 0 for a removal
	Stored bool      // the answer was stored
	At     time.Time // when
}

const (
	maxNotes   = 4096
	maxNoteKey = 1024
)

// notes is the owner's bounded table of Notes: a map, and the keys in the
// order noted, the oldest replaced first.
type notes struct {
	mu    sync.Mutex
	m     map[string]Note
	order []string
	next  int
}

func (n *notes) add(key string, note Note) {
	if len(key) > maxNoteKey {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = make(map[string]Note)
	}
	if _, ok := n.m[key]; !ok {
		if len(n.order) < maxNotes {
			n.order = append(n.order, key)
		} else {
			delete(n.m, n.order[n.next])
			n.order[n.next] = key
			n.next = (n.next + 1) % maxNotes
		}
	}
	n.m[key] = note
}

func (n *notes) get(key string) (Note, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	note, ok := n.m[key]
	return note, ok
}

// Note is the owner's last note of key: its last answer other than a
// plain hit, or what removed its stored response.
func (o *Owner) Note(key string) (Note, bool) { return o.notes.get(key) }

// noteAnswer keeps the outcome of a request for key that was not a plain
// hit.
func (o *Owner) noteAnswer(key string, out *Outcome) {
	if out.Member.Detail == "" || key == "" {
		return
	}
	o.notes.add(key, Note{Cache: out.Member.Cache, Reason: out.Member.Detail, Status: out.Member.Status,
		Stored: out.Kept(), At: time.Now()})
}

// missReason is why a lookup of key found nothing: it was purged (or
// invalidated) since it was stored, else otherwise (no stored response).
func (o *Owner) missReason(key, otherwise string) string {
	if note, ok := o.notes.get(key); ok && note.Cache == "" {
		return note.Reason
	}
	return otherwise
}

// removed notes that key's stored response was removed, and why.
func (o *Owner) removed(key, reason string) {
	o.notes.add(key, Note{Reason: reason, At: time.Now()})
}

// purgeIndex is the store as purges see it: a key a purge deletes is
// noted as purged.
type purgeIndex struct {
	*store.Store
	o *Owner
}

var _ purge.Index = purgeIndex{}

func (p purgeIndex) Delete(key string) bool {
	if !p.Store.Delete(key) {
		return false
	}
	p.o.removed(key, httpcache.ReasonPurged)
	return true
}
