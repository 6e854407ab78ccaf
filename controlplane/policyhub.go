package controlplane

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// maxTombstones bounds the deletions remembered for incremental pushes;
// past it the oldest are forgotten and older revisions get the full set.
const maxTombstones = 10000

// policyHub is this replica's view of the policy set, kept current by an
// etcd watch, with enough history (per-policy revisions and tombstones) to
// send a node only what changed since the revision it runs.
type policyHub struct {
	notify notifier

	mu       sync.Mutex
	loaded   bool
	policies map[string]*pb.CachePolicy
	deleted  map[string]int64 // name -> revision of its deletion
	rev      int64            // revision of the set
	floor    int64            // deletions after this revision are known
}

func newPolicyHub() *policyHub {
	return &policyHub{notify: newNotifier(), policies: map[string]*pb.CachePolicy{}, deleted: map[string]int64{}}
}

// since returns what a node at revision r needs: nil when it is current, the
// changes when they are known, the whole set otherwise.
func (h *policyHub) since(r int64) *pb.PolicySet {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.loaded || r == h.rev {
		return nil
	}
	if r <= 0 || r > h.rev || r < h.floor {
		set := &pb.PolicySet{Revision: h.rev}
		for _, p := range h.policies {
			set.Policies = append(set.Policies, p)
		}
		sortPolicies(set.Policies)
		return set
	}
	set := &pb.PolicySet{Revision: h.rev, Incremental: true, SinceRevision: r}
	for _, p := range h.policies {
		if p.GetRevision() > r {
			set.Policies = append(set.Policies, p)
		}
	}
	for name, dr := range h.deleted {
		if dr > r {
			set.Deleted = append(set.Deleted, name)
		}
	}
	sortPolicies(set.Policies)
	slices.Sort(set.Deleted)
	return set
}

// list returns the policies sorted by name and the set's revision; ok is
// false until the first read from etcd.
func (h *policyHub) list() (ps []*pb.CachePolicy, rev int64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.policies {
		ps = append(ps, p)
	}
	sortPolicies(ps)
	return ps, h.rev, h.loaded
}

// revision is the current revision of the set.
func (h *policyHub) revision() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

func sortPolicies(ps []*pb.CachePolicy) {
	slices.SortFunc(ps, func(a, b *pb.CachePolicy) int { return strings.Compare(a.GetName(), b.GetName()) })
}

// load replaces the view with a full read made at etcd revision at.
func (h *policyHub) load(ps []*pb.CachePolicy, rev, at int64) {
	h.mu.Lock()
	h.policies = make(map[string]*pb.CachePolicy, len(ps))
	for _, p := range ps {
		h.policies[p.GetName()] = p
	}
	h.deleted = map[string]int64{}
	h.rev, h.floor, h.loaded = rev, at, true
	h.mu.Unlock()
	h.notify.wake()
}

// apply folds one watch response into the view.
func (h *policyHub) apply(s *state, events []*clientv3.Event) {
	h.mu.Lock()
	for _, ev := range events {
		key := string(ev.Kv.Key)
		if key == s.policyRevKey() {
			h.rev = max(h.rev, ev.Kv.ModRevision)
			continue
		}
		name := strings.TrimPrefix(key, s.policyKey(""))
		switch ev.Type {
		case clientv3.EventTypePut:
			if p, err := decodePolicy(ev.Kv.Value, ev.Kv.ModRevision); err == nil {
				h.policies[name] = p
				delete(h.deleted, name)
			}
		case clientv3.EventTypeDelete:
			delete(h.policies, name)
			h.deleted[name] = ev.Kv.ModRevision
			if len(h.deleted) > maxTombstones {
				h.forgetOldestLocked()
			}
		}
	}
	h.mu.Unlock()
	h.notify.wake()
}

// forgetOldestLocked drops the oldest tombstone and raises the floor past it.
func (h *policyHub) forgetOldestLocked() {
	oldest, rev := "", int64(0)
	for name, r := range h.deleted {
		if oldest == "" || r < rev {
			oldest, rev = name, r
		}
	}
	delete(h.deleted, oldest)
	h.floor = max(h.floor, rev)
}

// watchPolicies keeps the policy hub current until ctx ends.
func (s *Server) watchPolicies(ctx context.Context) error {
	return s.loadAndWatch(ctx, "policies", s.state.policiesPrefix(), func(ctx context.Context) (int64, error) {
		ps, rev, at, err := s.state.policies(ctx)
		if err == nil {
			s.policies.load(ps, rev, at)
		}
		return at, err
	}, func(evs []*clientv3.Event) { s.policies.apply(s.state, evs) })
}

// loadAndWatch keeps a view current until ctx ends: load reads it whole
// and returns the revision read at; apply folds in each watch response
// after it. A broken watch starts over with a load.
func (s *Server) loadAndWatch(ctx context.Context, what, prefix string, load func(context.Context) (int64, error), apply func([]*clientv3.Event)) error {
	s.loadAndWatchRange(ctx, what, prefix, clientv3.GetPrefixRangeEnd(prefix), load, func(wr clientv3.WatchResponse) { apply(wr.Events) })
	return nil
}

// loadAndWatchRange is loadAndWatch for the keys from key to end, apply
// getting whole watch responses, progress notices included, for their
// revision.
func (s *Server) loadAndWatchRange(ctx context.Context, what, key, end string, load func(context.Context) (int64, error), apply func(clientv3.WatchResponse)) {
	for ctx.Err() == nil {
		at, err := load(ctx)
		if err != nil {
			s.log.Warn("reading "+what+"; retrying", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		for wr := range s.etcd.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithRange(end), clientv3.WithRev(at+1)) {
			if wr.Err() != nil {
				s.log.Warn(what+" watch interrupted", "err", wr.Err())
				break
			}
			apply(wr)
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return
		}
	}
}
