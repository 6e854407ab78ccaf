package store

import (
	"fmt"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// Memory is the memory tier: a ristretto cache whose cost is bytes, with
// TinyLFU admission so one-off objects do not push out popular ones.
type Memory struct {
	c *ristretto.Cache[string, *Entry]
	// evicted counts objects evicted to make room; ristretto's KeysEvicted
	// counts deletions too.
	evicted *atomic.Uint64
}

// minCounters keeps the frequency sketch useful for small budgets.
const minCounters = 10_000

// NewMemory returns a memory tier holding at most maxBytes.
func NewMemory(maxBytes int64) (*Memory, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("store: memory budget %d bytes; it must be positive", maxBytes)
	}
	evicted := new(atomic.Uint64)
	c, err := ristretto.NewCache(&ristretto.Config[string, *Entry]{
		// Ten counters per object we can hold, assuming objects of 1 KiB or
		// more, as ristretto's documentation advises.
		NumCounters:        max(maxBytes/1024*10, minCounters),
		MaxCost:            maxBytes,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true,
		OnEvict:            func(*ristretto.Item[*Entry]) { evicted.Add(1) },
	})
	if err != nil {
		return nil, fmt.Errorf("store: memory tier: %w", err)
	}
	return &Memory{c: c, evicted: evicted}, nil
}

// Get returns the entry stored under key.
func (m *Memory) Get(key string) (*Entry, bool) { return m.c.Get(key) }

// Set offers e to the tier and waits until the tier has decided, so that a
// request right after a fill sees the entry. It reports whether e was
// admitted; admission may refuse an entry that is less popular than what it
// would evict.
func (m *Memory) Set(e *Entry) bool {
	if !m.c.Set(e.Key, e, e.Cost()) {
		return false
	}
	m.c.Wait()
	_, ok := m.c.Get(e.Key)
	return ok
}

// Offer offers e to the tier without waiting for the decision: the entry
// may become visible a moment later, or never (admission refused it).
func (m *Memory) Offer(e *Entry) { m.c.Set(e.Key, e, e.Cost()) }

// Room reports whether n more bytes fit without an eviction.
func (m *Memory) Room(n int64) bool { return m.c.RemainingCost() >= n }

// Delete removes key.
func (m *Memory) Delete(key string) { m.c.Del(key) }

// Clear removes every object.
func (m *Memory) Clear() { m.c.Clear() }

// Stats returns the bytes and objects held. Deletions and replacements
// are counted as ristretto's policy applies them (it counts a deletion as
// an eviction), so the figures stay exact.
func (m *Memory) Stats() (bytes, objects int64) {
	s := m.c.Metrics
	bytes = m.c.MaxCost() - m.c.RemainingCost()
	objects = int64(s.KeysAdded()) - int64(s.KeysEvicted())
	return max(bytes, 0), max(objects, 0)
}

// Counts returns how many objects the tier admitted, evicted to make room,
// and refused (admission judged them less popular than what they would
// evict).
func (m *Memory) Counts() (admitted, evicted, rejected uint64) {
	s := m.c.Metrics
	return s.KeysAdded(), m.evicted.Load(), s.SetsRejected()
}

// Close stops the tier's goroutines.
func (m *Memory) Close() { m.c.Close() }
