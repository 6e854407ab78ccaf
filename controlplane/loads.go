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

// statusWriter writes the sessions' status records for the whole replica,
// from a few goroutines rather than one per session: what a session queues
// replaces what it had queued and not yet written, so that reports that
// come faster than etcd takes them are coalesced into the latest.
type statusWriter struct {
	mu      sync.Mutex
	pending map[*sessionRun]*pb.Node
	order   []*sessionRun // in the order queued; cancelled ones skipped
	wake    chan struct{}
}

// statusWorkers is how many status records a replica writes at once.
const statusWorkers = 4

func newStatusWriter() *statusWriter {
	return &statusWriter{pending: map[*sessionRun]*pb.Node{}, wake: make(chan struct{}, statusWorkers)}
}

// put queues st for session r, replacing any status of r not written yet.
func (w *statusWriter) put(r *sessionRun, st *pb.Node) {
	w.mu.Lock()
	if _, queued := w.pending[r]; !queued {
		w.order = append(w.order, r)
		r.writes.Add(1)
	}
	w.pending[r] = st
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// cancel drops what r queued and waits for a write of r under way: after
// it, nothing of r's is written.
func (w *statusWriter) cancel(r *sessionRun) {
	w.mu.Lock()
	if _, queued := w.pending[r]; queued {
		delete(w.pending, r)
		r.writes.Done()
	}
	w.mu.Unlock()
	r.writes.Wait()
}

// next takes the oldest queued status, if any.
func (w *statusWriter) next() (*sessionRun, *pb.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.order) > 0 {
		r := w.order[0]
		w.order = w.order[1:]
		if st, ok := w.pending[r]; ok {
			delete(w.pending, r)
			return r, st
		}
	}
	w.order = nil // let the backing array go
	return nil, nil
}

// run writes what is queued with statusWorkers goroutines until ctx ends.
func (w *statusWriter) run(ctx context.Context, write func(*sessionRun, *pb.Node)) {
	var wg sync.WaitGroup
	for range statusWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-w.wake:
				}
				for r, st := w.next(); r != nil; r, st = w.next() {
					write(r, st)
					r.writes.Done()
				}
			}
		})
	}
	wg.Wait()
}
