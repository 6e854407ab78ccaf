package main

// A simulated node: the nodes' own session client, with an Applier that
// records when each epoch and purge arrived instead of serving.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/dataplane/session"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// simNode is one node's session and what it was pushed, when.
type simNode struct {
	id     string
	client *session.Client
	stop   context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	epochs  map[uint64]time.Time // epoch -> when applied
	written map[uint64]time.Time // epoch -> when the control plane wrote it
	purges  map[string]time.Time // purge id -> when applied, for the isolated purges
	applied atomic.Int64         // purges applied
	rev     atomic.Int64         // highest purge revision applied
}

func (n *simNode) ApplyEpoch(e *pb.RingEpoch) {
	n.mu.Lock()
	n.epochs[e.GetEpoch()] = time.Now()
	n.written[e.GetEpoch()] = e.GetCreatedAt().AsTime()
	n.mu.Unlock()
}
func (n *simNode) ApplyPolicies(*pb.PolicySet) error { return nil }
func (n *simNode) PolicyRevision() int64             { return 0 }
func (n *simNode) CaughtUp()                         {}
func (n *simNode) PurgeRevision() int64              { return n.rev.Load() }

// ApplyPurges applies purges as a node with an empty store does, and
// acknowledges them as a node does: its applied revision at once.
func (n *simNode) ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult)) {
	now := time.Now()
	for _, p := range ps {
		if strings.HasPrefix(p.GetId(), "iso-") {
			n.mu.Lock()
			n.purges[p.GetId()] = now
			n.mu.Unlock()
		}
		n.rev.Store(max(n.rev.Load(), p.GetRevision()))
	}
	n.applied.Add(int64(len(ps)))
	if len(ps) > 0 {
		report(&pb.PurgeResult{NodeId: n.id, RevisionApplied: n.rev.Load()})
	}
}

// epochAt returns when epoch e was applied, and when it was written.
func (n *simNode) epochAt(e uint64) (applied, written time.Time, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	applied, ok = n.epochs[e]
	return applied, n.written[e], ok
}

func (n *simNode) purgeAt(id string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.purges[id]
	return t, ok
}

// startNode starts node i's session.
func (s *sim) startNode(i int) *simNode {
	n := &simNode{id: fmt.Sprintf("node-%04d", i), epochs: map[uint64]time.Time{}, written: map[uint64]time.Time{}, purges: map[string]time.Time{},
		done: make(chan struct{})}
	c, err := session.New(session.Config{
		Addresses: []string{s.control},
		Member:    &pb.Member{Id: n.id, PeerAddress: fmt.Sprintf("127.0.0.%d:%d", 2+i/60000, 1024+i%60000)},
		// The nodes' own defaults: load reports every 5 s, backoff from
		// 200 ms to 10 s.
		Load:   func() *pb.LoadReport { return &pb.LoadReport{} },
		Logger: s.nodeLog(i),
		// Every simulated node holds the same rings: one copy of each
		// serves them all, so the simulator's memory and work grow with
		// the nodes, not with their square.
		Epochs: s.rings,
	}, n)
	if err != nil {
		panic(err)
	}
	n.client = c
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	go func() {
		defer close(n.done)
		c.Run(ctx)
	}()
	return n
}

// waitAll waits until every node satisfies ok, and returns when the last
// one did (polled: the sessions signal nothing to a waiter).
func waitAll(ctx context.Context, nodes []*simNode, ok func(*simNode) bool) error {
	for {
		all := true
		for _, n := range nodes {
			if !ok(n) {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			missing := 0
			for _, n := range nodes {
				if !ok(n) {
					missing++
				}
			}
			return fmt.Errorf("%w: %d of %d nodes not there", ctx.Err(), missing, len(nodes))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
