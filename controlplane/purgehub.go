package controlplane

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// floorPrefix starts the id of the purge a node behind the floor gets.
const floorPrefix = "floor-"

// purgeHub is this replica's view of the recorded purges, kept current by
// an etcd watch, so that a session sends a node the purges after the
// revision it applied.
type purgeHub struct {
	notify notifier
	// ready is closed once the view was first loaded: sessions are
	// refused until then.
	ready     chan struct{}
	readyOnce sync.Once

	mu     sync.Mutex
	loaded bool
	purges []*pb.Purge // by revision
	items  [][]byte    // purges[i] as a PurgeBatch item (pushes.go)
	floor  *pb.Purge
}

func newPurgeHub() *purgeHub { return &purgeHub{notify: newNotifier(), ready: make(chan struct{})} }

// since returns the purges a node that applied revision r needs, in order,
// and whether the hub has loaded. A node behind the floor first gets a
// purge of everything it stored before it applies it.
func (h *purgeHub) since(r int64) ([]*pb.Purge, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*pb.Purge
	if floor, ok := h.sinceFloorLocked(r); ok {
		out = append(out, floor)
	}
	return append(out, h.purges[h.afterLocked(r):]...), h.loaded
}

// afterLocked is the index of the first purge after revision r.
func (h *purgeHub) afterLocked(r int64) int {
	i, _ := slices.BinarySearchFunc(h.purges, r+1, func(p *pb.Purge, rev int64) int { return cmp.Compare(p.GetRevision(), rev) })
	return i
}

// itemsSince appends to out the purges after revision r as PurgeBatch
// items, at most limit bytes of them (one at least), and returns it with
// the revision of the last.
func (h *purgeHub) itemsSince(out [][]byte, r int64, limit int) ([][]byte, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	last := r
	if f := h.floor; f != nil && r < f.GetRevision() {
		floor, _ := h.sinceFloorLocked(r)
		out = append(out, batchItem(floor))
		last = f.GetRevision()
	}
	size := 0
	for i := h.afterLocked(last); i < len(h.purges); i++ {
		if size+len(h.items[i]) > limit && len(out) > 0 {
			break
		}
		out = append(out, h.items[i])
		size += len(h.items[i])
		last = h.purges[i].GetRevision()
	}
	return out, last
}

// expired returns the oldest purges past the most kept, or recorded
// before cut: those the leader's compaction deletes. None before the
// view has loaded.
func (h *purgeHub) expired(most int, cut time.Time) []*pb.Purge {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for n < len(h.purges) && (len(h.purges)-n > most || h.purges[n].GetCreatedAt().AsTime().Before(cut)) {
		n++
	}
	return slices.Clone(h.purges[:n])
}

// head is the newest revision a node can have applied: its last purge's,
// or the floor's when it has none after it.
func (h *purgeHub) head() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var r int64
	if h.floor != nil {
		r = h.floor.GetRevision()
	}
	if n := len(h.purges); n > 0 {
		r = max(r, h.purges[n-1].GetRevision())
	}
	return r
}

// sinceFloorLocked is the purge of everything a node behind the floor gets.
func (h *purgeHub) sinceFloorLocked(r int64) (*pb.Purge, bool) {
	f := h.floor
	if f == nil || r >= f.GetRevision() {
		return nil, false
	}
	return &pb.Purge{Id: floorPrefix + fmt.Sprint(f.GetRevision()), Kind: pb.PurgeKind_PURGE_KIND_PREFIX,
		PathPrefix: "/", CreatedAt: f.GetCreatedAt(), Revision: f.GetRevision()}, true
}

func (h *purgeHub) load(ps []*pb.Purge, floor *pb.Purge) {
	h.mu.Lock()
	h.purges, h.floor, h.loaded = ps, floor, true
	h.items = make([][]byte, len(ps))
	for i, p := range ps {
		h.items[i] = batchItem(p)
	}
	h.mu.Unlock()
	h.readyOnce.Do(func() { close(h.ready) })
	h.notify.wake()
}

// apply folds one watch response into the view.
func (h *purgeHub) apply(s *state, events []*clientv3.Event) {
	h.mu.Lock()
	var deleted map[string]bool // by purge id
	for _, ev := range events {
		key := string(ev.Kv.Key)
		switch {
		case key == s.purgeFloorKey() && ev.Type == clientv3.EventTypePut:
			if f, err := decodePurge(ev.Kv.Value, 0); err == nil {
				h.floor = f
			}
		case !strings.HasPrefix(key, s.purgesPrefix()):
		case ev.Type == clientv3.EventTypePut:
			if p, err := decodePurge(ev.Kv.Value, ev.Kv.ModRevision); err == nil {
				h.purges = append(h.purges, p) // watch events come in revision order
				h.items = append(h.items, batchItem(p))
			}
		case ev.Type == clientv3.EventTypeDelete:
			if deleted == nil {
				deleted = make(map[string]bool)
			}
			deleted[strings.TrimPrefix(key, s.purgesPrefix())] = true
		}
	}
	h.dropLocked(deleted)
	h.mu.Unlock()
	h.notify.wake()
}

// dropLocked removes the purges of the ids deleted, in one pass whatever
// their number. The leader's compaction deletes the oldest purges, 32 a
// transaction: those lead the view and are cut off its front without
// moving the rest.
func (h *purgeHub) dropLocked(deleted map[string]bool) {
	if len(deleted) == 0 {
		return
	}
	lead := 0
	for lead < len(h.purges) && deleted[h.purges[lead].GetId()] {
		delete(deleted, h.purges[lead].GetId())
		lead++
	}
	clear(h.purges[:lead]) // let the dropped purges go
	clear(h.items[:lead])
	h.purges, h.items = h.purges[lead:], h.items[lead:]
	if len(deleted) == 0 {
		return
	}
	keep := 0
	for i, p := range h.purges {
		if !deleted[p.GetId()] {
			h.purges[keep], h.items[keep] = p, h.items[i]
			keep++
		}
	}
	clear(h.purges[keep:])
	clear(h.items[keep:])
	h.purges, h.items = h.purges[:keep], h.items[:keep]
}

// watchPurges keeps the purge hub current until ctx ends. purges/ and
// purges-floor share the watched prefix "purges".
func (s *Server) watchPurges(ctx context.Context) error {
	return s.loadAndWatch(ctx, "purges", s.cfg.Prefix+"purges", func(ctx context.Context) (int64, error) {
		ps, floor, at, err := s.state.purges(ctx)
		if err == nil {
			s.purgeHub.load(ps, floor)
			s.marks.setHead(s.purgeHub.head())
		}
		return at, err
	}, func(evs []*clientv3.Event) {
		s.purgeHub.apply(s.state, evs)
		s.marks.setHead(s.purgeHub.head())
	})
}
