package controlplane

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Acknowledgements are watermarks: the purge revision a node has applied
// answers for every purge before it. A replica keeps its sessions'
// revisions in memory and writes them as one record, watermarks/<replica>,
// at most once per batch interval, however many purges there are; a
// purge's status is computed from those records (ackview.go). A node's
// result that says more than "applied" (objects removed, an error, a sweep
// still running) is an exception, written in the same transaction as the
// record under purge-acks/<purge>/<node>.
//
// A record written at etcd revision w states, for every node the replica
// tracked when it was written, a revision the node had applied. A session
// starts being tracked before its registration is written, and a node whose
// session ended stays tracked, at its last revision, for keepEnded (longer
// than its status record can outlive its lease), so a record newer than a
// node's status record always speaks for that node. A replica killed before
// it wrote a batch loses nothing: nodes send their applied revision in the
// hello of their next session, on any replica.

func (s *state) watermarksPrefix() string            { return s.prefix + "watermarks/" }
func (s *state) watermarksKey(replica string) string { return s.watermarksPrefix() + replica }

// recordRefresh is how often a replica with sessions writes its record
// though nothing changed.
const recordRefresh = 10 * time.Second

// maxBehind bounds the nodes a record lists by name; every other node of the
// replica is answered for by the record's one revision.
const maxBehind = 64

// maxResultsPerBatch bounds the exceptions written with one record (etcd
// caps a transaction at 128 operations); the rest wait for the next batch.
const maxResultsPerBatch = 100

// maxQueuedResults bounds the exceptions waiting for a batch; past it the
// oldest are dropped (counted), their nodes' watermarks still written.
const maxQueuedResults = 10000

// watermarks is one replica's applied revisions of its sessions' nodes and
// the exceptions waiting to be written.
type watermarks struct {
	state     *state
	replica   string
	runID     string // this run of the replica process (Node.replica_run)
	interval  time.Duration
	keepEnded time.Duration
	log       *slog.Logger

	mu       sync.Mutex
	nodes    map[string]*tracked
	results  []*pb.PurgeResult
	dirty    bool
	flushing bool
	wake     chan struct{}
	// head is the newest purge revision this replica knows; revs counts
	// the revisions of the nodes with a session here. When the lowest of
	// them rises, the purges up to it are acknowledged by all once the
	// record is written, so caught lets the batch go at once rather than
	// waiting out the interval.
	head   int64
	revs   revCounts
	caught chan struct{}
	// heads are the purge revisions above the lowest applied one, with when
	// this replica learnt of each; lag is how long the purges the lowest
	// passed lately took to be applied by every node (batchDelay).
	heads []headAt
	lag   time.Duration

	// writes counts the records written; dropped the exceptions dropped at
	// the bound.
	writes, dropped atomic.Uint64
}

// tracked is one node's applied revision as this replica knows it.
type tracked struct {
	rev      int64
	sessions int       // open sessions of the node on this replica
	ended    time.Time // when the last one ended, while sessions is 0
}

func newWatermarks(s *state, replica string, interval, keepEnded time.Duration, log *slog.Logger) *watermarks {
	return &watermarks{state: s, replica: replica, runID: newRequestID(), interval: interval, keepEnded: keepEnded, log: log,
		nodes: map[string]*tracked{}, wake: make(chan struct{}, 1), caught: make(chan struct{}, 1)}
}

// updateLocked applies change to t, keeping the counts of applied revisions,
// and tells the batch when the lowest of them rose past a purge: every node
// here has then applied it.
func (w *watermarks) updateLocked(t *tracked, change func()) {
	low, had := w.revs.lowest()
	if t.sessions > 0 {
		w.revs.remove(t.rev)
	}
	change()
	if t.sessions > 0 {
		w.revs.add(t.rev)
	}
	if !had {
		return
	}
	switch now, has := w.revs.lowest(); {
	case !has: // the last session here ended
		w.heads = w.heads[:0]
	case now <= low:
		return
	case !w.passedLocked(now) && now < w.head:
		return // no purge is newly applied by every node
	}
	select {
	case w.caught <- struct{}{}:
	default:
	}
}

// passedLocked forgets the heads at or below low, every node having applied
// them, learns from the newest of them how long that took (lag), and
// reports whether there were any.
func (w *watermarks) passedLocked(low int64) bool {
	n := 0
	for n < len(w.heads) && w.heads[n].rev <= low {
		n++
	}
	if n == 0 {
		return false
	}
	// A purge slower than the last raises the lag at once; a faster one
	// lowers it by an eighth at most, so that one quick purge does not
	// cut the wait short for the next slow one.
	w.lag = max(time.Since(w.heads[n-1].at), w.lag-w.lag/8)
	w.heads = w.heads[n:]
	return true
}

// maxHeads bounds the purge heads kept for timing convergence; past it the
// oldest are forgotten, and only the convergence's timing is lost.
const maxHeads = 1024

// setHead records rev as the newest purge revision, if it is newer.
func (w *watermarks) setHead(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev <= w.head {
		return
	}
	w.head = rev
	if low, ok := w.revs.lowest(); ok && rev > low {
		if len(w.heads) == maxHeads {
			w.heads = w.heads[1:]
		}
		w.heads = append(w.heads, headAt{rev, time.Now()})
	}
}

// headAt is a purge revision and when the replica learnt of it.
type headAt struct {
	rev int64
	at  time.Time
}

// revCounts counts nodes by the revision they applied, in revision order:
// few distinct revisions at once (the purges in flight), the lowest removed
// and the highest added most often.
type revCounts []revCount

type revCount struct {
	rev int64
	n   int
}

func (c *revCounts) find(rev int64) (int, bool) {
	return slices.BinarySearchFunc(*c, rev, func(e revCount, r int64) int { return cmp.Compare(e.rev, r) })
}

func (c *revCounts) add(rev int64) {
	if i, ok := c.find(rev); ok {
		(*c)[i].n++
	} else {
		*c = slices.Insert(*c, i, revCount{rev, 1})
	}
}

func (c *revCounts) remove(rev int64) {
	i, ok := c.find(rev)
	if !ok {
		return
	}
	if (*c)[i].n--; (*c)[i].n > 0 {
		return
	}
	if i == 0 {
		*c = (*c)[1:] // the common case, without moving the rest
	} else {
		*c = slices.Delete(*c, i, i+1)
	}
}

// lowest is the lowest revision counted, if any.
func (c revCounts) lowest() (int64, bool) {
	if len(c) == 0 {
		return 0, false
	}
	return c[0].rev, true
}

// changedLocked marks the record as to be written.
func (w *watermarks) changedLocked() {
	w.dirty = true
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// open starts tracking a session of id whose node applied rev.
func (w *watermarks) open(id string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.nodes[id]
	if t == nil {
		t = &tracked{}
		w.nodes[id] = t
	}
	w.updateLocked(t, func() {
		t.sessions++
		if rev > t.rev || t.sessions == 1 && rev != t.rev {
			// A new session's hello says what the node has: a node whose
			// store was wiped has less, and nothing to purge.
			t.rev = rev
		}
	})
	w.changedLocked()
}

// applied records that id applied every purge up to rev.
func (w *watermarks) applied(id string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.nodes[id]; t != nil && rev > t.rev {
		w.updateLocked(t, func() { t.rev = rev })
		w.changedLocked()
	}
}

// revision is the revision id applied, as this replica knows it.
func (w *watermarks) revision(id string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.nodes[id]; t != nil {
		return t.rev
	}
	return 0
}

// writesPending reports whether a change waits for a batch, or a batch is
// being written.
func (w *watermarks) writesPending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dirty || w.flushing
}

// close ends a session of id; the node stays tracked at its revision for
// keepEnded. It returns the revision.
func (w *watermarks) close(id string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.nodes[id]
	if t == nil {
		return 0
	}
	w.updateLocked(t, func() {
		t.sessions--
		if t.sessions <= 0 {
			t.sessions, t.ended = 0, time.Now()
		}
	})
	return t.rev
}

// result queues an exception for the next batch.
func (w *watermarks) result(r *pb.PurgeResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.results) >= maxQueuedResults {
		w.results = w.results[1:]
		w.dropped.Add(1)
	}
	w.results = append(w.results, r)
	w.changedLocked()
}

// run writes a batch an interval after the first change in it (longer
// while nodes converge on the newest purge: batchDelay), or at once when
// the lowest revision its nodes applied rose past a purge (once an
// interval at most), until ctx ends; then it writes what is left, for a
// few seconds at most. So a replica writes at most two batches an
// interval.
func (w *watermarks) run(ctx context.Context) {
	var early time.Time // the last batch written at a catch-up
	t := time.NewTimer(time.Hour)
	t.Stop()
	// The record is written again at least every recordRefresh while the
	// replica has sessions: a replica's view read anew credits the
	// records newer than the status records it read.
	refresh := time.NewTicker(recordRefresh)
	defer refresh.Stop()
	defer func() {
		fctx, cancel := cleanupContext(ctx)
		defer cancel()
		if err := w.flush(fctx); err != nil {
			w.log.Warn("writing the last purge watermarks", "err", err)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-refresh.C:
			w.mu.Lock()
			if len(w.nodes) > 0 {
				w.dirty = true
			}
			w.mu.Unlock()
		}
		t.Reset(w.batchDelay())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-w.caught:
			t.Stop()
			// One batch an interval at most goes early.
			if wait := w.interval - time.Since(early); wait > 0 && !sleepCtx(ctx, wait) {
				return
			}
			early = time.Now()
		}
		// A catch-up or a change before this batch is written by it.
		select {
		case <-w.caught:
		default:
		}
		select {
		case <-w.wake:
		default:
		}
		if err := w.flush(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("writing purge watermarks; retrying", "err", err)
			w.mu.Lock()
			w.changedLocked()
			w.mu.Unlock()
		}
	}
}

// convergeWait is how many intervals a batch waits at least while nodes are
// still applying the newest purge and only their revisions wait to be
// written: the lowest revision rising writes it at once, so a lone purge
// costs its record and one batch.
const convergeWait = 4

// maxConvergeWait bounds that wait: how old the progress of a purge that
// some nodes have not applied may be in its status.
const maxConvergeWait = 3 * time.Second

// batchDelay is how long after its first change a batch is written,
// unless the lowest revision rising writes it first. While nodes converge
// on the newest purge it waits half as long again as the last purge took
// to reach every node, so that a batch seldom goes before the catch-up
// that writes it anyway: with 10,000 nodes a purge takes seconds to reach
// them all, and a batch every few intervals meanwhile would cost several
// writes a purge.
func (w *watermarks) batchDelay() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if low, ok := w.revs.lowest(); ok && low < w.head && len(w.results) == 0 {
		wait := min(max(convergeWait*w.interval, w.lag*3/2), maxConvergeWait)
		return max(wait, w.interval)
	}
	return w.interval
}

// record builds the record of the tracked nodes, forgetting those whose
// sessions ended longer than keepEnded ago.
func (w *watermarks) recordLocked(now time.Time) *pb.PurgeWatermarks {
	type nodeRev struct {
		id  string
		rev int64
	}
	all := make([]nodeRev, 0, len(w.nodes))
	for id, t := range w.nodes {
		if t.sessions == 0 && now.Sub(t.ended) > w.keepEnded {
			delete(w.nodes, id)
			continue
		}
		all = append(all, nodeRev{id, t.rev})
	}
	slices.SortFunc(all, func(a, b nodeRev) int { return cmp.Or(cmp.Compare(a.rev, b.rev), cmp.Compare(a.id, b.id)) })
	rec := &pb.PurgeWatermarks{Replica: w.replica, Run: w.runID, WrittenAt: timestamppb.New(now)}
	if len(all) == 0 {
		return rec
	}
	// The revision is the lowest one past the maxBehind lowest nodes (the
	// highest, when there are no more): those below it are named.
	rec.Revision = all[min(maxBehind, len(all)-1)].rev
	for _, n := range all {
		if n.rev >= rec.Revision {
			break
		}
		rec.Behind = append(rec.Behind, &pb.NodeWatermark{NodeId: n.id, Revision: n.rev})
	}
	return rec
}

// flush writes the record and up to maxResultsPerBatch exceptions in one
// transaction, if anything changed since the last.
func (w *watermarks) flush(ctx context.Context) error {
	w.mu.Lock()
	if !w.dirty {
		w.mu.Unlock()
		return nil
	}
	rec := w.recordLocked(time.Now())
	w.flushing = true
	defer func() {
		w.mu.Lock()
		w.flushing = false
		w.mu.Unlock()
	}()
	results := w.results[:min(len(w.results), maxResultsPerBatch)]
	w.results = w.results[len(results):]
	w.dirty = len(w.results) > 0
	if w.dirty {
		w.changedLocked()
	}
	w.mu.Unlock()
	ops := []clientv3.Op{{}} // the record, once it names the exceptions
	// etcd refuses a key twice in a transaction: a later result of a
	// node for a purge replaces its earlier one.
	last := make(map[string]int, len(results))
	for i, r := range results {
		last[w.state.purgeAckKey(r.GetPurgeId(), r.GetNodeId())] = i
	}
	for i, r := range results {
		if last[w.state.purgeAckKey(r.GetPurgeId(), r.GetNodeId())] != i {
			continue
		}
		rb, err := proto.Marshal(r)
		if err != nil {
			return fmt.Errorf("encoding purge result: %w", err)
		}
		// Written only while its purge is: the leader deletes a purge's
		// results with it, and those of a purge a node made up would
		// stay for good. One condition per result, in a transaction of
		// its own within the batch's, so that none holds back the others.
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.state.purgeKey(r.GetPurgeId())), ">", 0)},
			[]clientv3.Op{clientv3.OpPut(w.state.purgeAckKey(r.GetPurgeId(), r.GetNodeId()), string(rb))}, nil))
		if !slices.Contains(rec.Excepted, r.GetPurgeId()) {
			rec.Excepted = append(rec.Excepted, r.GetPurgeId())
		}
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding purge watermarks: %w", err)
	}
	ops[0] = clientv3.OpPut(w.state.watermarksKey(w.replica), string(b))
	if _, err := w.state.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
		w.mu.Lock()
		w.results = append(results, w.results...)
		w.mu.Unlock()
		return etcdErr(err, "writing the purge watermarks of %s", w.replica)
	}
	w.writes.Add(1)
	return nil
}
