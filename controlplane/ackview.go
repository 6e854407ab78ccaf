package controlplane

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// ackView is this replica's view, kept current by etcd watches, of what
// answers a purge's status: the replicas' watermark records, the nodes'
// status records (one per node with a session, bound to its replica's lease) and
// what was last heard of each node (seen/). A purge waits for every node
// with a status record, and for every node without one heard from within
// forgetAbsent.
type ackView struct {
	notify       notifier
	forgetAbsent time.Duration
	// ready is closed once the view was first read.
	ready chan struct{}

	mu      sync.Mutex
	records map[string]viewRecord // by replica
	status  map[string]viewStatus // by node
	seen    map[string]viewSeen   // by node
	// excepted are the purges with an exception recorded (the records
	// name them), so that only theirs are read from etcd; past maxExcepted
	// every purge's are, and so are they before the first read of the
	// records: exceptions written before it are not named.
	excepted map[string]bool
	lossy    bool
	// seenRev is the etcd revision the view's watch is known to be current
	// to (events, or progress notices, up to it); revWaiters wait for it
	// to reach their revision (catchUp).
	seenRev    int64
	revWaiters []revWaiter
	// progressAt is when a progress notice was last asked for (UnixNano).
	progressAt atomic.Int64
	knownFrom  int64 // the etcd revision the records were last read whole at
	// credits holds each node's credit, in the order of ids, and sorted
	// the credited revision of every node waited for, in order; both nil
	// when a change made them stale (creditsLocked).
	credits []credit
	sorted  []int64
	at      time.Time // when they were computed: absent nodes age out
	// ids are the nodes of status and seen, sorted; nil when a node came
	// or went since.
	ids []string
}

type viewRecord struct {
	run    string
	rev    int64
	behind map[string]int64
	modRev int64
}

// viewStatus is a node's status record as the view needs it. regRev is
// the revision from which the session's replica run tracked the node: that
// of the status write that named a new replica run (the node registered
// there), or, for status records read whole, their last write.
type viewStatus struct {
	replica, run string
	regRev       int64
	purgeRev     int64
	lastReport   *timestamppb.Timestamp
}

type viewSeen struct {
	purgeRev int64
	at       *timestamppb.Timestamp
}

func newAckView(forgetAbsent time.Duration) *ackView {
	v := &ackView{notify: newNotifier(), forgetAbsent: forgetAbsent, ready: make(chan struct{}),
		records: map[string]viewRecord{}, status: map[string]viewStatus{}, seen: map[string]viewSeen{}}
	v.excepted = map[string]bool{}
	return v
}

// creditedLocked is the revision node id is known to have applied, and
// whether a purge waits for it at all.
func (v *ackView) creditedLocked(id string, now time.Time) (rev int64, waited, live bool) {
	if st, ok := v.status[id]; ok {
		rev = st.purgeRev
		if r, ok := v.records[st.replica]; ok && r.run == st.run && r.modRev > st.regRev {
			w, named := r.behind[id]
			if !named {
				w = r.rev
			}
			rev = max(rev, w)
		}
		if s, ok := v.seen[id]; ok {
			rev = max(rev, s.purgeRev)
		}
		return rev, true, true
	}
	s, ok := v.seen[id]
	if !ok || v.forgetAbsent > 0 && now.Sub(s.at.AsTime()) > v.forgetAbsent {
		return 0, false, false
	}
	return s.purgeRev, true, false
}

// credit is what a node waited for is credited with (creditedLocked).
type credit struct {
	rev          int64
	waited, live bool
}

// creditsLocked returns the credit of every node of idsLocked, in its
// order, and the credited revisions of the nodes waited for, sorted:
// computed again after a change, or after a second, as absent nodes age
// out. Every purge's count and status reads them as they are.
func (v *ackView) creditsLocked(now time.Time) ([]credit, []int64) {
	ids := v.idsLocked()
	if v.sorted != nil && now.Sub(v.at) < time.Second {
		return v.credits, v.sorted
	}
	credits := make([]credit, len(ids))
	sorted := make([]int64, 0, len(ids))
	for i, id := range ids {
		c := &credits[i]
		c.rev, c.waited, c.live = v.creditedLocked(id, now)
		if c.waited {
			sorted = append(sorted, c.rev)
		}
	}
	slices.Sort(sorted)
	v.credits, v.sorted, v.at = credits, sorted, now
	return credits, sorted
}

// count returns how many of the nodes waited for have applied rev, and how
// many there are.
func (v *ackView) count(rev int64) (acked, total int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, s := v.creditsLocked(time.Now())
	i, _ := slices.BinarySearch(s, rev)
	return len(s) - i, len(s)
}

// credited is the revision node id is known to have applied.
func (v *ackView) credited(id string) int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	rev, _, _ := v.creditedLocked(id, time.Now())
	return rev
}

// maxListed bounds each list of a purge's status: the results, the
// pending nodes and the unreachable ones.
const maxListed = 256

// idsLocked returns the nodes of status and seen, sorted. New ids make
// the credits, which follow their order, stale.
func (v *ackView) idsLocked() []string {
	if v.ids != nil {
		return v.ids
	}
	v.staleLocked()
	ids := make([]string, 0, len(v.status)+len(v.seen))
	for id := range v.status {
		ids = append(ids, id)
	}
	for id := range v.seen {
		if _, live := v.status[id]; !live {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	v.ids = ids
	return ids
}

// purgeStatus judges every node waited for against p; results holds the
// exceptions recorded for p, by node; plain acknowledgements are listed
// only when listPlain is set (else only counted). Each list holds at most maxListed
// nodes, the first by node id; the results that say more than "applied"
// are listed before plain acknowledgements (exceptionFirst).
func (v *ackView) purgeStatus(p *pb.Purge, results map[string]*pb.PurgeResult, listPlain bool) *pb.PurgeStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	ids := v.idsLocked()
	credits, _ := v.creditsLocked(now)
	st := &pb.PurgeStatus{Purge: p}
	var excepted []*pb.PurgeResult
	// The plain acknowledgements listed, in node order, in one allocation.
	var plain []pb.PurgeResult
	if listPlain {
		plain = make([]pb.PurgeResult, min(len(ids), maxListed))
	}
	nplain := 0
	for i, id := range ids {
		c := credits[i]
		switch r, ok := results[id]; {
		case !c.waited:
		case c.rev >= p.GetRevision():
			st.Acknowledged++
			switch {
			case ok:
				excepted = append(excepted, r)
			case nplain < len(plain):
				pr := &plain[nplain]
				pr.NodeId, pr.PurgeId, pr.RevisionApplied = id, p.GetId(), c.rev
				nplain++
			}
		default:
			if len(st.Pending) < maxListed {
				st.Pending = append(st.Pending, id)
			} else {
				st.PendingOmitted++
			}
			if c.live {
				break
			}
			if len(st.Unreachable) < maxListed {
				st.Unreachable = append(st.Unreachable, &pb.UnreachableNode{NodeId: id, Since: v.seen[id].at})
			} else {
				st.UnreachableOmitted++
			}
		}
	}
	if len(excepted) > maxListed {
		slices.SortStableFunc(excepted, exceptionFirst) // in node order within each kind
		excepted = excepted[:maxListed]
	}
	keep := min(nplain, maxListed-len(excepted))
	st.Results = make([]*pb.PurgeResult, 0, len(excepted)+keep)
	st.Results = append(st.Results, excepted...)
	for i := range keep {
		st.Results = append(st.Results, &plain[i])
	}
	if len(excepted) > 0 { // else the plain ones are in node order already
		slices.SortFunc(st.Results, func(x, y *pb.PurgeResult) int { return strings.Compare(x.GetNodeId(), y.GetNodeId()) })
	}
	st.ResultsOmitted = st.Acknowledged - int32(len(st.Results))
	st.Complete = st.PendingOmitted == 0 && len(st.Pending) == 0
	return st
}

// exceptionFirst orders results by what an operator looks at first: an
// error, then a sweep still running, then objects removed.
func exceptionFirst(x, y *pb.PurgeResult) int {
	rank := func(r *pb.PurgeResult) int {
		switch {
		case r.GetError() != "":
			return 0
		case r.GetSweeping():
			return 1
		case r.GetObjectsRemoved() > 0:
			return 2
		}
		return 3
	}
	return rank(x) - rank(y)
}

// maxExcepted bounds the purges the view remembers having exceptions.
const maxExcepted = 100000

// except notes that purge id has an exception recorded.
func (v *ackView) except(id string) {
	if len(v.excepted) >= maxExcepted {
		v.excepted = map[string]bool{}
	}
	v.excepted[id] = true
}

// mayHaveExceptions reports whether exceptions of purge p may be recorded:
// it is named by a record seen, or older than what the view has seen.
func (v *ackView) mayHaveExceptions(p *pb.Purge) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lossy || p.GetRevision() <= v.knownFrom || v.excepted[p.GetId()]
}

// staleLocked makes the next count and status compute the credits again:
// a record changed, or the nodes did.
func (v *ackView) staleLocked() { v.credits, v.sorted = nil, nil }

// decodeRecord decodes a watermark record, telling except of the purges
// whose exceptions were written with it.
func decodeRecord(kv []byte, modRev int64, except func(id string)) (viewRecord, bool) {
	rec := &pb.PurgeWatermarks{}
	if proto.Unmarshal(kv, rec) != nil {
		return viewRecord{}, false
	}
	for _, id := range rec.GetExcepted() {
		except(id)
	}
	r := viewRecord{run: rec.GetRun(), rev: rec.GetRevision(), modRev: modRev, behind: make(map[string]int64, len(rec.GetBehind()))}
	for _, b := range rec.GetBehind() {
		r.behind[b.GetNodeId()] = b.GetRevision()
	}
	return r, true
}

func decodeViewStatus(kv []byte, modRev int64) (string, viewStatus, bool) {
	n := &pb.Node{}
	if proto.Unmarshal(kv, n) != nil {
		return "", viewStatus{}, false
	}
	return n.GetMember().GetId(), viewStatus{replica: n.GetSessionReplica(), run: n.GetReplicaRun(), regRev: modRev,
		purgeRev: n.GetPurgeRevision(), lastReport: n.GetLastReportAt()}, true
}

func decodeViewSeen(kv []byte) (string, viewSeen, bool) {
	n := &pb.Node{}
	if proto.Unmarshal(kv, n) != nil {
		return "", viewSeen{}, false
	}
	return n.GetMember().GetId(), viewSeen{purgeRev: n.GetPurgeRevision(), at: n.GetLastReportAt()}, true
}

// watchAcks keeps the view current until ctx ends: one watch per prefix.
func (s *Server) watchAcks(ctx context.Context) error {
	v := s.acks
	st := s.state
	type part struct {
		what, prefix string
		// put applies an event, and says whether it may change what
		// the nodes are credited with.
		put   func(key string, kv *clientv3.Event) bool
		reset func(at int64)
	}
	parts := []part{
		{"purge watermarks", st.watermarksPrefix(), func(key string, ev *clientv3.Event) bool {
			replica := strings.TrimPrefix(key, st.watermarksPrefix())
			if ev.Type == clientv3.EventTypeDelete {
				delete(v.records, replica)
			} else if r, ok := decodeRecord(ev.Kv.Value, ev.Kv.ModRevision, v.except); ok {
				v.records[replica] = r
			}
			return true
		}, func(at int64) { v.records, v.knownFrom = map[string]viewRecord{}, at }},
		{"node status", st.statusPrefix(), func(key string, ev *clientv3.Event) bool {
			if ev.Type == clientv3.EventTypeDelete {
				delete(v.status, strings.TrimPrefix(key, st.statusPrefix()))
				v.ids = nil
				return true
			}
			id, vs, ok := decodeViewStatus(ev.Kv.Value, ev.Kv.ModRevision)
			if !ok {
				return false
			}
			old, known := v.status[id]
			if !known {
				v.ids = nil
			}
			// A rewrite by the same run keeps the registration's revision.
			if known && old.replica == vs.replica && old.run == vs.run && ev.IsModify() {
				vs.regRev = old.regRev
			}
			v.status[id] = vs
			// A rewrite for the load alone (once a minute a node)
			// credits the node with what it was credited with before,
			// so it leaves every node's credit as computed: at 10,000
			// nodes those rewrites come 170 a second.
			return !known || old.replica != vs.replica || old.run != vs.run || old.regRev != vs.regRev || old.purgeRev != vs.purgeRev
		}, func(int64) { v.status, v.ids = map[string]viewStatus{}, nil }},
		{"nodes last heard", st.seenPrefix(), func(key string, ev *clientv3.Event) bool {
			if ev.Type == clientv3.EventTypeDelete {
				delete(v.seen, strings.TrimPrefix(key, st.seenPrefix()))
				v.ids = nil
				return true
			}
			id, vs, ok := decodeViewSeen(ev.Kv.Value)
			if !ok {
				return false
			}
			old, known := v.seen[id]
			if !known {
				v.ids = nil
			}
			v.seen[id] = vs
			// Written with every status record: when the node has one,
			// only the revision it applied counts here (creditedLocked).
			_, live := v.status[id]
			return !known || !live || old.purgeRev != vs.purgeRev
		}, func(int64) { v.seen, v.ids = map[string]viewSeen{}, nil }},
	}
	// relevant applies ev if it is of a part, and says whether it was and
	// whether the credits may have changed with it.
	relevant := func(key string, ev *clientv3.Event) (part, credits bool) {
		for _, p := range parts {
			if strings.HasPrefix(key, p.prefix) {
				return true, p.put(key, ev)
			}
		}
		return false, false // a purge record: it moves the view's revision on
	}
	// One watch over a range that holds the three parts and the purge
	// records: a purge's own record, when its event comes, shows the view
	// current to its revision, with no progress notice to wait for (etcd
	// defers those while any watcher of the stream is behind).
	lo, hi := st.purgesPrefix(), st.purgesPrefix()
	for _, p := range parts {
		lo, hi = min(lo, p.prefix), max(hi, p.prefix)
	}
	var first sync.Once
	s.loadAndWatchRange(ctx, "the purge acknowledgements' records", lo, clientv3.GetPrefixRangeEnd(hi), func(ctx context.Context) (int64, error) {
		// The three parts read at one revision.
		var at int64
		resps := make([]*clientv3.GetResponse, len(parts))
		for i, p := range parts {
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if i > 0 {
				opts = append(opts, clientv3.WithRev(at))
			}
			resp, err := s.etcd.Get(ctx, p.prefix, opts...)
			if err != nil {
				return 0, etcdErr(err, "reading %s", p.what)
			}
			if i == 0 {
				at = resp.Header.Revision
			}
			resps[i] = resp
		}
		v.mu.Lock()
		for i, p := range parts {
			p.reset(at)
			for _, kv := range resps[i].Kvs {
				p.put(string(kv.Key), &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
			}
		}
		v.staleLocked()
		v.advanceLocked(at)
		v.mu.Unlock()
		v.notify.wake()
		first.Do(func() { close(v.ready) })
		return at, nil
	}, func(wr clientv3.WatchResponse) {
		v.mu.Lock()
		changed, credits := false, false
		for _, ev := range wr.Events {
			p, c := relevant(string(ev.Kv.Key), ev)
			changed, credits = changed || p, credits || c
		}
		if credits {
			v.staleLocked() // under the lock that changed the records, not at the wake
		}
		v.advanceLocked(wr.Header.Revision)
		v.mu.Unlock()
		if changed {
			v.notify.wake()
		}
	})
	return nil
}

// revWaiter is a catchUp waiting for the view to reach rev.
type revWaiter struct {
	rev  int64
	done chan struct{}
}

// advanceLocked records that the view is current to rev, and lets go the
// catchUps waiting for it.
func (v *ackView) advanceLocked(rev int64) {
	if rev <= v.seenRev {
		return
	}
	v.seenRev = rev
	kept := v.revWaiters[:0]
	for _, w := range v.revWaiters {
		if w.rev <= rev {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	clear(v.revWaiters[len(kept):])
	v.revWaiters = kept
}

// current reports whether the view has seen etcd up to rev.
func (v *ackView) current(rev int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.seenRev >= rev
}

// catchUp waits until the view has seen etcd up to rev, asking etcd for a
// progress notice on the view's watches, or until ctx ends: a purge is
// judged against every node registered before it.
func (v *ackView) catchUp(ctx context.Context, cli *clientv3.Client, rev int64) {
	v.mu.Lock()
	if v.seenRev >= rev {
		v.mu.Unlock()
		return
	}
	w := revWaiter{rev: rev, done: make(chan struct{})}
	v.revWaiters = append(v.revWaiters, w)
	v.mu.Unlock()
	// The record's own event usually comes first; a progress notice is
	// asked for only when it is slow (the view's watch shares the stream
	// of this metadata, and one ask serves every purge waiting meanwhile).
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-ctx.Done():
			v.mu.Lock()
			v.revWaiters = slices.DeleteFunc(v.revWaiters, func(x revWaiter) bool { return x.done == w.done })
			v.mu.Unlock()
			return
		case <-t.C:
			if now := time.Now().UnixNano(); now-v.progressAt.Load() > int64(20*time.Millisecond) {
				v.progressAt.Store(now)
				_ = cli.RequestProgress(clientv3.WithRequireLeader(ctx))
			}
		}
	}
}

// exceptions reads the results recorded for purge id, by node.
func (s *state) exceptions(ctx context.Context, id string) (map[string]*pb.PurgeResult, error) {
	resp, err := s.kv.Get(ctx, s.purgeAcksPrefix(id), clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		return nil, etcdErr(err, "reading the results of purge %s", id)
	}
	out := make(map[string]*pb.PurgeResult, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r := &pb.PurgeResult{}
		if proto.Unmarshal(kv.Value, r) == nil {
			out[r.GetNodeId()] = r
		}
	}
	return out, nil
}
