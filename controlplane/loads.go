package controlplane

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// loadBook holds the last load report of each node with a session on this
// replica. Load reports are figures only operators read: they stay in
// memory, and the admin calls of this replica answer from here; the status
// record in etcd gets them every loadRecordInterval, for the other replicas.
type loadBook struct {
	mu    sync.Mutex
	nodes map[string]loadEntry
}

type loadEntry struct {
	owner *sessionRun // the session that reported it
	st    *pb.Node    // serving epoch, load, report time
}

func newLoadBook() *loadBook { return &loadBook{nodes: map[string]loadEntry{}} }

// put records the report in st of the node's session r.
func (b *loadBook) put(id string, r *sessionRun, st *pb.Node) {
	n := &pb.Node{ServingEpoch: st.GetServingEpoch(), Load: st.GetLoad(), LastReportAt: st.GetLastReportAt()}
	b.mu.Lock()
	b.nodes[id] = loadEntry{r, n}
	b.mu.Unlock()
}

// forget drops the node's report if session r made it.
func (b *loadBook) forget(id string, r *sessionRun) {
	b.mu.Lock()
	if e, ok := b.nodes[id]; ok && e.owner == r {
		delete(b.nodes, id)
	}
	b.mu.Unlock()
}

// get returns the node's last report here, if its session is on this replica.
func (b *loadBook) get(id string) (*pb.Node, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.nodes[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(e.st).(*pb.Node), true
}

// statusWriter hands a session's status records to a writer goroutine,
// newest first: reports that come faster than etcd takes them are
// coalesced into the latest.
type statusWriter struct {
	mu      sync.Mutex
	pending *pb.Node
	wake    chan struct{}
}

// put queues st, replacing any status not written yet.
func (w *statusWriter) put(st *pb.Node) {
	w.mu.Lock()
	w.pending = st
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes what is queued until ctx ends.
func (w *statusWriter) run(ctx context.Context, write func(*pb.Node)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		w.mu.Lock()
		st := w.pending
		w.pending = nil
		w.mu.Unlock()
		if st != nil {
			write(st)
		}
	}
}
