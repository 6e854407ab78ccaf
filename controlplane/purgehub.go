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
// revision it applied. Of every purge retained it keeps what compaction
// needs (a purgeRef); the newest, up to its window, it also keeps whole,
// decoded and encoded for pushes. A node behind the window gets what it
// missed from a read of etcd, one at a time for every session that needs
// it then: so the view's memory does not grow with the purges retained.
type purgeHub struct {
	notify notifier
	// ready is closed once the view was first loaded: sessions are
	// refused until then.
	ready     chan struct{}
	readyOnce sync.Once
	// window is how many of the newest purges are kept whole.
	window int
	// read reads every retained purge, by revision, the floor, and the
	// revision read at.
	read  func(ctx context.Context) ([]*pb.Purge, *pb.Purge, int64, error)
	reads flight
	// onHead learns the view's head after every change, before the
	// sessions are told of it: the watermarks must know a purge is in
	// flight before the first node acknowledges it.
	onHead func(rev int64)

	mu     sync.Mutex
	loaded bool
	refs   []purgeRef   // every retained purge, by revision
	purges []wholePurge // the newest of refs, whole
	floor  *pb.Purge
}

// wholePurge is a purge in the view's window, with its encoding as a
// PurgeBatch item (pushes.go).
type wholePurge struct {
	p    *pb.Purge
	item []byte
}

func wholeOf(p *pb.Purge) wholePurge { return wholePurge{p, batchItem(p)} }

// purgeRef is what the view keeps of a retained purge outside its window.
type purgeRef struct {
	id      string
	rev     int64
	created int64 // Unix nanoseconds
}

func refOf(p *pb.Purge) purgeRef {
	return purgeRef{id: p.GetId(), rev: p.GetRevision(), created: p.GetCreatedAt().AsTime().UnixNano()}
}

// defaultPurgeWindow is how many of the newest purges a view keeps whole
// unless told otherwise: ten seconds at a thousand purges a second.
const defaultPurgeWindow = 10000

func newPurgeHub() *purgeHub {
	return &purgeHub{notify: newNotifier(), ready: make(chan struct{}), window: defaultPurgeWindow}
}

// since returns the purges a node that applied revision r needs, in order,
// and whether the hub has loaded (sinceParts).
func (h *purgeHub) since(ctx context.Context, r int64) ([]*pb.Purge, bool, error) {
	out, whole, loaded, err := h.sinceParts(ctx, r)
	for _, w := range whole {
		out = append(out, w.p)
	}
	return out, loaded, err
}

// sinceParts is what a node that applied revision r needs, in order: first
// the purge of everything it stored before the floor, if it is behind it,
// and, if it is behind the window, the purges read from etcd after r;
// then the view's whole purges after those (a copy). A read of etcd is one
// at a time, shared by the sessions that need one meanwhile and reused for
// a second by those it answers for. If more than the window were recorded
// since the read, the whole purges are left out: the node's next push
// reads again from the read's revision.
func (h *purgeHub) sinceParts(ctx context.Context, r int64) (read []*pb.Purge, whole []wholePurge, loaded bool, err error) {
	from := r
	h.mu.Lock()
	if h.wholeAfterLocked(r) {
		if f, ok := floorPurge(h.floor, r); ok {
			read = []*pb.Purge{f}
		}
	} else {
		h.mu.Unlock()
		got, err := h.readAfter(ctx, r)
		if err != nil {
			return nil, nil, true, err
		}
		read, from = purgesAfter(got.purges, got.floor, r), got.at
		h.mu.Lock()
		if !h.wholeAfterLocked(from) {
			h.mu.Unlock()
			return read, nil, true, nil
		}
	}
	defer h.mu.Unlock()
	return read, slices.Clone(h.wholeAfterRevLocked(from)), h.loaded, nil
}

// wholeAfterRevLocked is the view's whole purges after revision r.
func (h *purgeHub) wholeAfterRevLocked(r int64) []wholePurge {
	return h.purges[after(h.purges, func(w wholePurge) int64 { return w.p.GetRevision() }, r):]
}

// purgesAfter is what a node that applied revision r needs of ps (by
// revision) behind floor.
func purgesAfter(ps []*pb.Purge, floor *pb.Purge, r int64) []*pb.Purge {
	var out []*pb.Purge
	if f, ok := floorPurge(floor, r); ok {
		out = append(out, f)
	}
	return append(out, ps[after(ps, (*pb.Purge).GetRevision, r):]...)
}

// after is the index of the first of s (by revision) after revision r.
func after[T any](s []T, revision func(T) int64, r int64) int {
	i, _ := slices.BinarySearchFunc(s, r+1, func(v T, rev int64) int { return cmp.Compare(revision(v), rev) })
	return i
}

// wholeAfterLocked reports whether every retained purge after revision r
// is kept whole.
func (h *purgeHub) wholeAfterLocked(r int64) bool {
	out := len(h.refs) - len(h.purges) // retained, not whole
	return out == 0 || r >= h.refs[out-1].rev
}

// readAfter reads the retained purges from etcd through the hub's
// flight, for a node that applied revision r.
func (h *purgeHub) readAfter(ctx context.Context, r int64) (etcdPurges, error) {
	return h.reads.do(ctx, func() (etcdPurges, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second) // shared: no one caller's end ends it
		defer cancel()
		ps, floor, at, err := h.read(rctx)
		return etcdPurges{ps, floor, at}, err
	}, func(v etcdPurges) bool {
		// A read from before the node's revision does not hold what
		// came between its revision and the window.
		return v.at >= r
	})
}

// etcdPurges is one read of the retained purges: by revision, the floor,
// and the revision read at.
type etcdPurges struct {
	purges []*pb.Purge
	floor  *pb.Purge
	at     int64
}

// flight runs one read at a time for every caller that asks meanwhile,
// and hands its result to those that ask within a second of its end and
// for whom it is usable.
type flight struct {
	mu   sync.Mutex
	call *flightCall
}

type flightCall struct {
	done chan struct{}
	end  time.Time
	v    etcdPurges
	err  error
}

func (f *flight) do(ctx context.Context, read func() (etcdPurges, error), usable func(etcdPurges) bool) (etcdPurges, error) {
	for {
		f.mu.Lock()
		c := f.call
		if c == nil || c.err != nil || !c.end.IsZero() && (time.Since(c.end) > time.Second || !usable(c.v)) {
			c = &flightCall{done: make(chan struct{})}
			f.call = c
			go func() {
				v, err := read()
				f.mu.Lock()
				c.v, c.err, c.end = v, err, time.Now()
				f.mu.Unlock()
				close(c.done)
			}()
		}
		f.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return etcdPurges{}, ctx.Err()
		}
		if c.err != nil || usable(c.v) {
			return c.v, c.err
		}
		// A read that began before the caller's revision was recorded:
		// the next one will hold it.
	}
}

// itemsSince appends to out the purges after revision r as PurgeBatch
// items, at most limit bytes of them (one at least), and returns it with
// the revision of the last. A node behind the window waits for a read of
// etcd.
func (h *purgeHub) itemsSince(ctx context.Context, out [][]byte, r int64, limit int) ([][]byte, int64, error) {
	read, whole, _, err := h.sinceParts(ctx, r)
	if err != nil {
		return out, r, err
	}
	last, size := r, 0
	take := func(w wholePurge) bool {
		if size+len(w.item) > limit && len(out) > 0 {
			return false
		}
		out = append(out, w.item)
		size += len(w.item)
		last = w.p.GetRevision()
		return true
	}
	for _, p := range read { // encoded here, only as far as the limit
		if !take(wholeOf(p)) {
			return out, last, nil
		}
	}
	for _, w := range whole { // the encodings kept
		if !take(w) {
			break
		}
	}
	return out, last, nil
}

// expired returns the oldest purges past the most kept, or recorded
// before cut: those the leader's compaction deletes. None before the
// view has loaded.
func (h *purgeHub) expired(most int, cut time.Time) []purgeRef {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := cut.UnixNano()
	n := 0
	for n < len(h.refs) && (len(h.refs)-n > most || h.refs[n].created < c) {
		n++
	}
	return slices.Clone(h.refs[:n])
}

// retained is how many purges the view knows of, and how many of them it
// keeps whole.
func (h *purgeHub) retained() (all, whole int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.refs), len(h.purges)
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
	if n := len(h.refs); n > 0 {
		r = max(r, h.refs[n-1].rev)
	}
	return r
}

// floorPurge is the purge of everything a node behind floor gets.
func floorPurge(f *pb.Purge, r int64) (*pb.Purge, bool) {
	if f == nil || r >= f.GetRevision() {
		return nil, false
	}
	return &pb.Purge{Id: floorPrefix + fmt.Sprint(f.GetRevision()), Kind: pb.PurgeKind_PURGE_KIND_PREFIX,
		PathPrefix: "/", CreatedAt: f.GetCreatedAt(), Revision: f.GetRevision()}, true
}

func (h *purgeHub) load(ps []*pb.Purge, floor *pb.Purge) {
	h.mu.Lock()
	h.floor, h.loaded = floor, true
	h.refs = make([]purgeRef, len(ps))
	for i, p := range ps {
		h.refs[i] = refOf(p)
	}
	whole := ps[len(ps)-min(len(ps), h.window):]
	h.purges = make([]wholePurge, len(whole))
	for i, p := range whole {
		h.purges[i] = wholeOf(p)
	}
	h.mu.Unlock()
	h.readyOnce.Do(func() { close(h.ready) })
	h.changed()
}

// changed tells onHead, then the sessions, that the view changed.
func (h *purgeHub) changed() {
	if h.onHead != nil {
		h.onHead(h.head())
	}
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
				h.refs = append(h.refs, refOf(p)) // watch events come in revision order
				h.purges = append(h.purges, wholeOf(p))
			}
		case ev.Type == clientv3.EventTypeDelete:
			if deleted == nil {
				deleted = make(map[string]bool)
			}
			deleted[strings.TrimPrefix(key, s.purgesPrefix())] = true
		}
	}
	h.dropLocked(deleted)
	if out := len(h.purges) - h.window; out > 0 { // past the window: kept as refs only
		clear(h.purges[:out])
		h.purges = h.purges[out:]
	}
	h.mu.Unlock()
	h.changed()
}

// dropLocked removes the purges of the ids deleted, in one pass whatever
// their number. The leader's compaction deletes the oldest purges, 32 a
// transaction: those lead the view and are cut off its front without
// moving the rest.
func (h *purgeHub) dropLocked(deleted map[string]bool) {
	if len(deleted) == 0 {
		return
	}
	newest := int64(-1)
	h.refs = dropIDs(h.refs, deleted, func(r purgeRef) string { return r.id }, func(r purgeRef) { newest = max(newest, r.rev) })
	if len(h.purges) > 0 && newest >= h.purges[0].p.GetRevision() { // some were whole
		h.purges = dropIDs(h.purges, deleted, func(w wholePurge) string { return w.p.GetId() }, func(wholePurge) {})
	}
}

// dropIDs removes from s the elements whose id is in ids, calling dropped
// for each: those leading s by cutting them off its front, any others in
// one pass.
func dropIDs[T any](s []T, ids map[string]bool, id func(T) string, dropped func(T)) []T {
	lead := 0
	for lead < len(s) && ids[id(s[lead])] {
		dropped(s[lead])
		lead++
	}
	clear(s[:lead]) // let the dropped go
	s = s[lead:]
	if lead == len(ids) {
		return s
	}
	keep := 0
	for _, v := range s {
		if ids[id(v)] {
			dropped(v)
			continue
		}
		s[keep] = v
		keep++
	}
	clear(s[keep:])
	return s[:keep]
}

// watchPurges keeps the purge hub current until ctx ends. purges/ and
// purges-floor share the watched prefix "purges".
func (s *Server) watchPurges(ctx context.Context) error {
	return s.loadAndWatch(ctx, "purges", s.cfg.Prefix+"purges", func(ctx context.Context) (int64, error) {
		ps, floor, at, err := s.state.purges(ctx)
		if err == nil {
			s.purgeHub.load(ps, floor)
		}
		return at, err
	}, func(evs []*clientv3.Event) {
		s.purgeHub.apply(s.state, evs)
	})
}
