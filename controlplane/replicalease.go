package controlplane

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// replicaLease is the one etcd lease a replica binds its sessions' records
// to (session, member and status keys), kept alive by the replica: etcd
// renews one lease per replica, not one per node, so that ten thousand
// sessions cost etcd what ten do.
//
// A node's own liveness is its session: when the stream breaks the replica
// deletes the node's records itself once the lease TTL has passed
// (expireAfter), unless a newer session of the id registered meanwhile. A
// replica that dies takes its timers with it; its lease then expires
// within the TTL and every record still bound to it goes, while the nodes
// that reconnected to another replica have rebound theirs to that one's
// lease by registering again.
type replicaLease struct {
	kv       *clientv3.Client
	ttl      time.Duration
	stopping <-chan struct{}

	mu  sync.Mutex
	cur *leaseRun
}

// leaseRun is one granted replica lease.
type leaseRun struct {
	id clientv3.LeaseID
	// ctx ends (end) once the lease is no longer kept alive: expired,
	// revoked, or its keep-alive gave up. Every session bound to it ends
	// so that its node registers again under the next one.
	ctx context.Context
	end context.CancelFunc
}

// newLeaseRun is the run of lease id, kept alive until its end.
func newLeaseRun(id clientv3.LeaseID) *leaseRun {
	ctx, end := context.WithCancel(context.Background())
	return &leaseRun{id: id, ctx: ctx, end: end}
}

// register registers st's session with the replica's lease and returns
// the lease and the revision of the registration. A lease etcd no longer
// knows (revoked, or expired before its keep-alive noticed) is given up
// and the registration tried once more with a new one.
func (l *replicaLease) register(ctx context.Context, s *state, st *pb.Node, instance string) (*leaseRun, int64, error) {
	for try := 0; ; try++ {
		run, err := l.get(ctx)
		if err != nil {
			return nil, 0, err
		}
		rev, err := s.register(ctx, st, instance, run.id)
		if try == 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			run.end()
			continue
		}
		return run, rev, err
	}
}

// get returns the replica's lease, granting a new one when there is none
// or the last was lost.
func (l *replicaLease) get(ctx context.Context) (*leaseRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.cur; c != nil {
		select {
		case <-c.ctx.Done():
		default:
			return c, nil
		}
	}
	g, err := l.kv.Grant(ctx, int64(l.ttl/time.Second))
	if err != nil {
		return nil, etcdErr(err, "granting the replica's lease")
	}
	kaCtx, cancel := context.WithCancel(context.Background())
	ka, err := l.kv.KeepAlive(kaCtx, g.ID)
	if err != nil {
		cancel()
		return nil, etcdErr(err, "keeping the replica's lease alive")
	}
	run := newLeaseRun(g.ID)
	go func() {
		for range ka { // drained until etcd's client gives the lease up
		}
		run.end()
	}()
	go func() {
		// A stopping replica stops renewing and does not revoke: its
		// nodes have the TTL to register with another replica before
		// their records go.
		select {
		case <-l.stopping:
		case <-run.ctx.Done():
		}
		cancel()
	}()
	l.cur = run
	return run, nil
}

// expireAfter removes the records of id's session registered at rev once
// d has passed, unless a newer session registered meanwhile: what a lease
// per node did when its keep-alives stopped. It tries again every
// expireRetry until etcd takes it, since nothing else removes a record
// bound to a live replica's lease. A stopping replica leaves them to its
// lease's expiry.
func (n *nodeService) expireAfter(d time.Duration, id string, rev int64) {
	time.AfterFunc(d, func() {
		select {
		case <-n.stopped.Done():
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.state.expire(ctx, id, rev); err != nil {
			n.log.Warn("removing the records of a node whose session ended; retrying", "node", id, "err", err)
			n.expireAfter(expireRetry, id, rev)
		}
	})
}

// expireRetry is how soon a failed removal of an ended session's records
// is tried again.
const expireRetry = time.Second
