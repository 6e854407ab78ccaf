package purge

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/store"
)

// Index is the store as a sweep sees it. Delete reports whether the key
// was there; it also forgets what the store keeps about the key besides
// (a Vary marker's count of variants).
type Index interface {
	Keys(fn func(key string) bool)
	Peek(key string) (*store.Entry, bool)
	Delete(key string) bool
}

// SoftHold is how long a soft ban keeps what it matches stored and stale:
// a sweep after that removes what it still matches (objects nobody asked
// for since), so that the ban can go.
const SoftHold = 10 * time.Minute

// Sweep applies s's bans to every object of idx whenever bans are added
// (s.Wake), until ctx ends. Fills that began before the newest ban store
// objects it matches, so each sweep starts once fills tracked by inflight
// that are older than it are done. After each sweep the bans it applied
// are dropped and swept is told of them. A soft ban stays while stored
// objects it matches wait to be revalidated, SoftHold at most: sweeps come
// again until then.
func Sweep(ctx context.Context, s *Set, idx Index, inflight *Inflight, swept func(applied []*Ban)) {
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Wake:
		case <-again:
		}
		again = nil
		pending := s.Pending()
		if len(pending) == 0 {
			continue
		}
		newest := pending[len(pending)-1].InstalledAt()
		for inflight.StartedBefore(newest) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		now := time.Now().UnixNano()
		stale := map[*Ban]bool{} // soft bans that still match
		idx.Keys(func(k string) bool {
			e, ok := idx.Peek(k)
			if !ok {
				return ctx.Err() == nil
			}
			if b := s.Match(e); b != nil && idx.Delete(k) {
				b.Removed().Add(1)
			} else if b := s.Stale(e); b != nil {
				if now-b.InstalledAt() < int64(SoftHold) {
					stale[b] = true
				} else if idx.Delete(k) {
					b.Removed().Add(1)
				}
			}
			return ctx.Err() == nil
		})
		if ctx.Err() != nil {
			return
		}
		done := slices.DeleteFunc(pending, func(b *Ban) bool { return stale[b] })
		s.Drop(done)
		swept(done)
		if len(stale) > 0 {
			again = time.After(SoftHold / 10)
		}
	}
}

// Behind reports whether a peer's answer that carries purge revision rev
// (ok false: none, as hop.PurgeRevision reads it) comes from a node that
// had applied fewer purges than s. An answer without one is taken as
// behind.
func (s *Set) Behind(rev int64, ok bool) bool { return !ok || rev < s.Revision() }

// Inflight tracks when the fills running now began.
type Inflight struct {
	mu     sync.Mutex
	next   uint64
	active map[uint64]int64
}

// Begin records a fill starting now; the returned function ends it.
func (f *Inflight) Begin() func() {
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

// StartedBefore reports whether a fill that began before t still runs.
func (f *Inflight) StartedBefore(t int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.active {
		if s < t {
			return true
		}
	}
	return false
}
