package controlplane

import (
	"sync"
	"sync/atomic"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// hub holds the current epoch as this replica last saw it in etcd and wakes
// every session when it changes. Sessions read the latest value when woken,
// so a slow node skips epochs it was too slow to receive instead of
// blocking the others.
type hub struct {
	current atomic.Pointer[pb.RingEpoch]

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

func newHub() *hub { return &hub{subs: make(map[chan struct{}]struct{})} }

// epoch returns the current epoch, nil before the first.
func (h *hub) epoch() *pb.RingEpoch { return h.current.Load() }

// publish makes e current if it is newer and wakes the subscribers.
func (h *hub) publish(e *pb.RingEpoch) bool {
	for {
		old := h.current.Load()
		if old != nil && old.GetEpoch() >= e.GetEpoch() {
			return false
		}
		if h.current.CompareAndSwap(old, e) {
			break
		}
	}
	h.mu.Lock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default: // already has a wake-up pending
		}
	}
	h.mu.Unlock()
	return true
}

// subscribe returns a channel that receives a value after each publish, and
// the function that ends the subscription.
func (h *hub) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// sessions counts the subscribed sessions.
func (h *hub) sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
