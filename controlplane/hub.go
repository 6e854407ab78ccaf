package controlplane

import (
	"sync"
	"sync/atomic"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// notifier wakes every subscriber after a change. Subscribers read the
// latest state when woken, so a slow node skips intermediate states instead
// of blocking the others.
type notifier struct {
	mu sync.Mutex
	// subs are the subscribers, each with whether it is muted: a muted
	// one is not woken (wake skips it without touching its channel).
	subs map[chan struct{}]*atomic.Bool
}

func newNotifier() notifier { return notifier{subs: make(map[chan struct{}]*atomic.Bool)} }

// wake signals every subscriber that has no wake-up pending and is not
// muted.
func (n *notifier) wake() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch, muted := range n.subs {
		if muted.Load() {
			continue
		}
		select {
		case ch <- struct{}{}:
		default: // already has a wake-up pending
		}
	}
}

// subscribe returns a channel that receives a value after each change, and
// the function that ends the subscription.
func (n *notifier) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	_, cancel := n.subscribeOn(ch)
	return ch, cancel
}

// subscribeOn wakes ch (buffered, one value) after each change, while the
// subscription's mute that it returns is not set: a muted subscriber reads
// the state anew once it clears it. One channel may be subscribed to
// several notifiers, so that a loop waits on one channel for all of them.
func (n *notifier) subscribeOn(ch chan struct{}) (*atomic.Bool, func()) {
	muted := new(atomic.Bool)
	n.mu.Lock()
	n.subs[ch] = muted
	n.mu.Unlock()
	return muted, func() {
		n.mu.Lock()
		delete(n.subs, ch)
		n.mu.Unlock()
	}
}

// hub holds the current epoch as this replica last saw it in etcd, and its
// pushes encoded once for every session.
type hub struct {
	notify  notifier
	current atomic.Pointer[pb.RingEpoch]
	msgs    atomic.Pointer[epochMessages]
	mu      sync.Mutex // one publish at a time: each epoch's change is from the one before
}

func newHub() *hub { return &hub{notify: newNotifier()} }

// epoch returns the current epoch, nil before the first.
func (h *hub) epoch() *pb.RingEpoch { return h.current.Load() }

// publish makes e current if it is newer and wakes the subscribers.
func (h *hub) publish(e *pb.RingEpoch) bool {
	h.mu.Lock()
	old := h.current.Load()
	if old != nil && old.GetEpoch() >= e.GetEpoch() {
		h.mu.Unlock()
		return false
	}
	h.msgs.Store(newEpochMessages(old, e))
	h.current.Store(e)
	h.mu.Unlock()
	h.notify.wake()
	return true
}

// messages returns the current epoch's pushes, nil before the first.
func (h *hub) messages() *epochMessages { return h.msgs.Load() }
