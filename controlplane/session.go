package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// nodeService implements NodeService: one Session stream per cache node.
type nodeService struct {
	pb.UnsafeNodeServiceServer

	state     *state
	hub       *hub
	policies  *policyHub
	purges    *purgeHub
	marks     *watermarks
	loads     *loadBook
	statuses  *statusWriter
	members   *memberWatch
	joinToken string
	// maxMembers bounds the ring's members (Config.MaxMembers).
	maxMembers int
	// tlsNames are the names the control plane serves TLS as: no node
	// gets a peer certificate for one.
	tlsNames []string
	// checkJoin verifies a join token within the limits of failed ones
	// per caller (Server.checkCredential).
	checkJoin func(ctx context.Context, verify func() bool) error
	leaseTTL  time.Duration
	// lease is the replica's, which every session's records are bound to.
	lease   *replicaLease
	replica string
	// stopped ends when the replica begins to stop.
	stopped context.Context
	log     *slog.Logger
	// ca issues peer-hop certificates once loaded; caWanted says whether it
	// is configured at all.
	ca       *atomic.Pointer[certAuthority]
	caWanted bool
	sessions prometheus.Gauge
	// refused counts hellos refused for an id with an open session.
	refused prometheus.Counter
	// admit bounds the sessions registered at once; busy counts the
	// hellos it refused.
	admit *registrations
	busy  prometheus.Counter
}

var _ pb.NodeServiceServer = (*nodeService)(nil)

// Session registers the node as a member (its records bound to the
// replica's lease), sends it a snapshot and then every new epoch. A node
// that closes its side cleanly leaves at once (its records are deleted); a
// node whose stream breaks stays a member for the lease TTL, so a brief
// disconnect does not move keys. An id has one open session: a hello from
// another process with the id is refused while it lasts, and a session
// whose member record is deleted or replaced ends, so that its node
// registers again.
func (n *nodeService) Session(stream pb.NodeService_SessionServer) (err error) {
	ctx := stream.Context()
	hello, err := n.recvHello(stream)
	if err != nil {
		return err
	}
	if err := n.roomFor(ctx, hello.GetMember().GetId()); err != nil {
		return err
	}
	// From here to the snapshot the session costs etcd several requests:
	// only so many at once.
	admitted, err := n.admit.enter(ctx)
	if err != nil {
		if status.Code(err) == codes.Unavailable {
			n.busy.Inc()
		}
		return err
	}
	defer admitted()
	m := proto.Clone(hello.GetMember()).(*pb.Member)
	m.State = pb.MemberState_MEMBER_STATE_ACTIVE
	m.JoinedAt = timestamppb.Now()
	r := &sessionRun{n: n, stream: &timedStream{NodeService_SessionServer: stream}, m: m, log: n.log.With("node", m.GetId()), compact: hello.GetCompactPushes(), instance: hello.GetInstance(),
		sweeping: map[string]bool{}, admitted: admitted}
	// Tracked before it is registered: every watermark record written
	// after its registration speaks for it (watermarks.go).
	n.marks.open(m.GetId(), hello.GetPurgeRevision())
	r.st = &pb.Node{Member: m, SessionReplica: n.replica, ReplicaRun: n.marks.runID, ServingEpoch: hello.GetLastEpoch(),
		PolicyRevision: hello.GetPolicyRevision(), PurgeRevision: hello.GetPurgeRevision()}
	lease, rev, err := n.lease.register(ctx, n.state, r.st, hello.GetInstance())
	if err != nil {
		n.marks.close(m.GetId())
		if errors.Is(err, errSessionHeld) {
			return n.refuse(ctx, m, err)
		}
		return toStatus(err)
	}
	r.lease, r.rev = lease.id, rev
	// A drain a former process of the id made of itself ended with it.
	if err := n.state.clearSelfDrain(ctx, m.GetId(), "", hello.GetInstance()); err != nil {
		r.log.Warn("clearing a former process's drain", "err", err)
	}
	// However the session ends, its id is free for a new process at once;
	// the member record stays for the lease TTL unless dropped.
	defer func() {
		applied := n.marks.close(m.GetId())
		n.loads.forget(m.GetId(), r)
		rctx, cancel := cleanupContext(ctx)
		defer cancel()
		rerr := n.state.release(rctx, m.GetId(), rev, r.drop, r.left, applied)
		if rerr != nil {
			r.log.Warn("ending the session in etcd", "err", rerr)
		}
		switch {
		case !r.drop:
			n.expireAfter(n.leaseTTL, m.GetId(), rev)
		case rerr != nil:
			n.expireAfter(expireRetry, m.GetId(), rev)
		}
		if r.left { // the process is gone: so is the drain it made of itself
			if rerr := n.state.clearSelfDrain(rctx, m.GetId(), hello.GetInstance(), ""); rerr != nil {
				r.log.Warn("clearing the node's drain", "err", rerr)
			}
		}
	}()
	// The member record is watched (one watch for the replica): deleted or
	// overwritten by anything but this session, the node is told to
	// register again.
	records, stopWatch, err := n.members.subscribe(ctx, m.GetId(), rev)
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading the member record of %s: %v; reconnect", m.GetId(), err)
	}
	defer stopWatch()
	r.log.Info("node session started", "peer", m.GetPeerAddress(), "lease", fmt.Sprintf("%x", lease.id), "revision", rev)
	n.sessions.Inc()
	defer n.sessions.Dec()
	return r.serve(ctx, hello, lease.ctx, records)
}

// sessionRun is one session's state while it serves.
type sessionRun struct {
	n      *nodeService
	stream *timedStream
	m      *pb.Member
	st     *pb.Node         // the status record, as last written or to be
	lease  clientv3.LeaseID // the replica's, which the records are bound to
	// rev is the revision of the session's registration, which guards
	// every write it makes.
	rev int64
	log *slog.Logger
	// admitted ends the session's turn among the registrations at once,
	// once its snapshot is sent.
	admitted func()
	// instance is the node process's (Hello.instance).
	instance string
	// compact: the node applies purge batches, epoch changes and
	// snapshot members (Hello.compact_pushes).
	compact bool
	// drop and left say how the session ended: its records deleted at
	// once, and the node gone on purpose.
	drop, left bool

	sentEpoch  uint64
	sentPurges int64
	// pushedAt is when purges were last pushed; paced, when the next push
	// waits for purgePushPace to pass since.
	pushedAt     time.Time
	paced        *time.Timer
	sentPolicies int64
	// sweeping are the purges whose "sweeping" result this session
	// recorded; the goroutine that receives the node's messages owns it.
	sweeping map[string]bool
	// purgesMuted is set while a paced push is due (setPaced).
	purgesMuted *atomic.Bool
	// certs, epochReads and drains bound what the node's requests cost
	// the replica (a signature, an etcd read, an etcd write that every
	// replica's watch sees), each made at its kind's first request; a
	// certificate asked for again past its bound is the last one issued.
	certs, epochReads, drains *rate.Limiter
	lastCert                  *pb.Certificate
	lastCSR                   []byte
	// writes counts this session's status records queued or being written.
	writes sync.WaitGroup
	// statusAt is when the status record was last queued.
	statusAt time.Time
}

// serve sends the snapshot and then every change until the session ends.
func (r *sessionRun) serve(ctx context.Context, hello *pb.Hello, lease context.Context, records <-chan *clientv3.Event) error {
	n := r.n
	// The replica's stop and its lease's loss end every session: each
	// ends this session's own context (a callback, not a channel every
	// session's loop waits on, whose lock a thousand sessions' selects
	// would share).
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(n.stopped, func() { cancel(errReplicaStopping) })()
	defer context.AfterFunc(lease, func() { cancel(errLeaseLost) })()
	// A new epoch, policy or purge wakes the loop on one channel (each
	// channel a select waits on costs every wake of a thousand sessions'
	// loops a lock), and the loop pushes whatever the node lacks.
	wake := make(chan struct{}, 1)
	_, unsubscribeEpochs := n.hub.notify.subscribeOn(wake)
	defer unsubscribeEpochs()
	_, unsubscribePolicies := n.policies.notify.subscribeOn(wake)
	defer unsubscribePolicies()
	// While a paced push is due, purges recorded meanwhile go with it:
	// they need not wake the session (at a thousand sessions and many
	// purges a second, those wakes were most of the replica's work).
	mute, unsubscribePurges := n.purges.notify.subscribeOn(wake)
	defer unsubscribePurges()
	r.purgesMuted = mute
	if err := r.snapshot(hello); err != nil {
		return err
	}
	r.admitted()
	// A heartbeat goes out only when nothing else has for an interval:
	// any message tells the node that its session is alive (node.proto).
	// At 10,000 sessions heartbeats sent beside the pushes were 4,000
	// messages a second, against about 7,000 pushes a second while a
	// replica pushed purges one at a time.
	every := n.leaseTTL / 4
	beat := time.NewTimer(every)
	defer beat.Stop()

	// The status record is written off this loop (by the replica's
	// writer), so that etcd's latency never holds back what is pushed to
	// the node; nothing of this session's is written once it has ended.
	defer n.statuses.cancel(r)
	msgs := make(chan *pb.SessionRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := r.stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if res := req.GetPurgeResult(); res != nil {
				// Taken here: it touches only the replica's watermarks
				// and this goroutine's sweeping, and acknowledgements are
				// most of what nodes send under purges.
				r.purgeResult(res)
				continue
			}
			select {
			case msgs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()

	for {
		var err error
		select {
		case <-sctx.Done():
			// A stopping replica lets its lease go too: the stop is
			// what ended the session then.
			switch {
			case n.stopped.Err() != nil:
				return status.Error(codes.Unavailable, "control plane replica is shutting down; reconnect to another")
			case context.Cause(sctx) == errLeaseLost:
				r.log.Warn("lease lost; ending session so the node registers again")
				r.drop = true
				return sessionEnd(codes.FailedPrecondition, pb.SessionEnd_SESSION_END_LEASE_LOST, "the lease of member %s expired or could not be kept alive", r.m.GetId())
			}
			r.log.Info("node session ended; member stays for the lease TTL", "err", ctx.Err())
			return nil
		case ev := <-records:
			if end := n.recordChanged(ctx, ev, r.m, r.rev); end != nil {
				r.log.Warn("ending the session", "reason", status.Convert(end).Message())
				r.drop = true
				return end
			}
		case <-beat.C:
			if wait := every - time.Since(r.stream.sentAt); wait > 0 {
				beat.Reset(wait)
				continue
			}
			err = r.stream.SendMsg(heartbeat)
			beat.Reset(every)
		case <-wake:
			err = r.pushChanges()
		case <-r.pacedC():
			r.setPaced(nil)
			err = r.pushPurges()
		case req := <-msgs:
			err = r.handle(ctx, req)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				// The node said goodbye: leave the ring now rather than after the TTL.
				r.drop, r.left = true, true
				r.log.Info("node left")
				return nil
			}
			r.log.Info("node session broken; member stays for the lease TTL", "err", err)
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// heartbeat is the Heartbeat message, encoded once.
var heartbeat = mustEncode(&pb.SessionResponse{Msg: &pb.SessionResponse_Heartbeat{Heartbeat: &pb.Heartbeat{}}})

// timedStream is a session's stream, noting when a message last went out
// on it. Only the session's loop sends.
type timedStream struct {
	pb.NodeService_SessionServer
	sentAt time.Time
}

func (s *timedStream) Send(m *pb.SessionResponse) error {
	s.sentAt = time.Now()
	return s.NodeService_SessionServer.Send(m)
}

func (s *timedStream) SendMsg(m any) error {
	s.sentAt = time.Now()
	return s.NodeService_SessionServer.SendMsg(m)
}

// errReplicaStopping and errLeaseLost are why a session's context ends
// before its stream's does.
var (
	errReplicaStopping = errors.New("the control plane replica is stopping")
	errLeaseLost       = errors.New("the replica's lease was lost")
)

// snapshot sends what the node needs to serve: the purges it missed, the
// epoch (a compact node's members ahead of it, in bounded messages), the
// policies it lacks.
func (r *sessionRun) snapshot(hello *pb.Hello) error {
	n := r.n
	msgs := n.hub.messages()
	cur := msgs.epochOrNil()
	policies := n.policies.since(hello.GetPolicyRevision())
	// A node must not serve what it missed being purged: the snapshot
	// carries every purge after the revision it applied, so the purges
	// must be known before it is sent.
	purges, loaded, err := n.purges.since(r.stream.Context(), hello.GetPurgeRevision())
	if err != nil {
		return err
	}
	if !loaded {
		return status.Error(codes.Unavailable, "this control plane replica has not read the purges from etcd yet; retry")
	}
	// However many purges were retained, no message passes the node's
	// receive limit: all but the last batch go ahead of the snapshot.
	batches := purgeBatches(purges, missedPurgesBytes)
	for _, b := range batches[:len(batches)-1] {
		if err := r.stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_MissedPurges{MissedPurges: &pb.MissedPurges{Purges: b}}}); err != nil {
			return err
		}
	}
	// A node that holds the epoch, or the one before it, is not sent
	// the members again: after a replica's restart every node says hello
	// at once, and at 10,000 members each would otherwise take a
	// megabyte.
	var held *pb.RingEpoch
	if r.compact {
		held = msgs.held(hello)
	}
	switch {
	case held != nil:
		cur = held
	case r.compact && msgs != nil:
		for _, part := range msgs.members {
			if err := r.stream.SendMsg(part); err != nil {
				return err
			}
		}
		cur = msgs.bare
	}
	snap := &pb.Snapshot{Epoch: cur, Member: r.m, Policies: policies, Purges: batches[len(batches)-1],
		HeartbeatInterval: durationpb.New(n.leaseTTL / 4), MembersHeld: held != nil}
	if csr := hello.GetCsr(); len(csr) > 0 {
		snap.Certificate = r.certificate(csr)
	}
	if err := r.stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}); err != nil {
		return err
	}
	r.sentEpoch = cur.GetEpoch()
	r.sentPurges = hello.GetPurgeRevision()
	if len(purges) > 0 {
		r.sentPurges = purges[len(purges)-1].GetRevision()
	}
	r.sentPolicies = hello.GetPolicyRevision()
	if policies != nil {
		r.sentPolicies = policies.GetRevision()
	}
	if held != nil {
		return r.pushEpoch() // the change, when the node holds the epoch before
	}
	return nil
}

// loadRecordInterval is how often a node's load reports reach its status
// record in etcd, for the admin calls answered by other replicas; this
// replica answers from memory.
const loadRecordInterval = time.Minute

// handle answers one message from the node.
func (r *sessionRun) handle(ctx context.Context, req *pb.SessionRequest) error {
	n := r.n
	switch msg := req.GetMsg().(type) {
	case *pb.SessionRequest_Load:
		if routes := msg.Load.GetResponseBytesByRoute(); !boundedRoutes(routes) {
			r.log.Warn("node's load report names too many routes, or too long; its routes are left out",
				"routes", len(routes), "max", maxLoadRoutes)
			msg.Load.ResponseBytesByRoute = nil
		}
		if dropUnknownPast(msg.Load) {
			r.log.Warn("node's load report carries too many bytes of unknown fields; they are left out", "max", maxUnknownFields)
		}
		r.st.Load, r.st.ServingEpoch, r.st.LastReportAt = msg.Load, msg.Load.GetEpoch(), timestamppb.Now()
		n.loads.put(r.m.GetId(), r, r.st)
		if time.Since(r.statusAt) < loadRecordInterval {
			return nil
		}
	case *pb.SessionRequest_EpochRequest:
		if !allow(&r.epochReads, epochReadsPerSecond, epochReadsBurst) {
			return nil // the epoch reaches the node by the watch, or its next ask
		}
		// This replica's watch may lag the node's peers: read etcd.
		e, _, err := n.state.currentEpoch(ctx)
		if err != nil || e.GetEpoch() <= r.sentEpoch {
			return nil
		}
		if err := r.stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Epoch{Epoch: e}}); err != nil {
			return err
		}
		r.sentEpoch = e.GetEpoch()
		return nil
	case *pb.SessionRequest_DrainRequest:
		if !allow(&r.drains, drainsPerSecond, drainsBurst) {
			r.log.Warn("node asks to drain itself faster than its bound; this ask is dropped", "per_second", drainsPerSecond)
			return nil
		}
		if err := n.state.setSelfDrained(ctx, r.m.GetId(), r.instance); err != nil {
			r.log.Warn("draining the node at its request", "err", err)
		} else {
			r.log.Info("node drains itself (undrain gives its keys back while it runs)")
		}
		return nil
	case *pb.SessionRequest_CertificateRequest:
		cert := r.certificate(msg.CertificateRequest.GetCsr())
		return r.stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Certificate{Certificate: cert}})
	case *pb.SessionRequest_PolicyAck:
		ack := msg.PolicyAck
		r.st.PolicyRevision = ack.GetAppliedRevision()
		if ack.GetRefusedRevision() != 0 {
			r.st.PolicyRefusedRevision, r.st.PolicyError = ack.GetRefusedRevision(), cutText(ack.GetError(), maxNodeError)
			r.log.Warn("node refused a policy push", "revision", ack.GetRefusedRevision(), "reason", r.st.PolicyError)
			// The node kept its set: an incremental push from what was
			// sent would have a gap. The next change goes whole.
			r.sentPolicies = 0
		}
	default:
		return nil
	}
	r.st.PurgeRevision = n.marks.revision(r.m.GetId())
	n.statuses.put(r, proto.Clone(r.st).(*pb.Node))
	r.statusAt = time.Now()
	return nil
}

// purgeResult takes a node's result: its applied revision goes into this
// replica's watermarks; a result that says more than "applied" (objects
// removed, an error, a sweep still running, or the final result after a
// recorded "sweeping" one) is recorded as an exception.
func (r *sessionRun) purgeResult(res *pb.PurgeResult) {
	res.NodeId = r.m.GetId()
	// A result is written to etcd with the replica's watermark record, in
	// one transaction for every node of the replica: what the node says is
	// bounded, so that one node's result never makes that transaction too
	// large for etcd (it would be retried, and fail, for good).
	if id := res.GetPurgeId(); id != "" && !validRequestID.MatchString(id) {
		r.log.Warn("node's purge result names no purge id that can be recorded; its applied revision alone is kept",
			"purge", quoteCut(id))
		res.PurgeId = ""
	}
	res.Error = cutText(res.GetError(), maxNodeError)
	dropUnknownPast(res)
	if res.GetError() != "" {
		r.log.Warn("node failed to apply a purge", "purge", res.GetPurgeId(), "err", res.GetError())
	}
	// The result is queued before the revision moves: a batch that
	// completes the purge then carries what the node said of it.
	defer r.n.marks.applied(r.m.GetId(), res.GetRevisionApplied())
	if res.GetPurgeId() == "" {
		return // the applied revision alone
	}
	informative := res.GetObjectsRemoved() != 0 || res.GetError() != "" || res.GetSweeping() || r.sweeping[res.GetPurgeId()]
	if res.GetSweeping() && len(r.sweeping) < maxSweepingTracked {
		r.sweeping[res.GetPurgeId()] = true
	} else if !res.GetSweeping() {
		delete(r.sweeping, res.GetPurgeId())
	}
	// The floor is no recorded purge: nobody waits for it.
	if !strings.HasPrefix(res.GetPurgeId(), floorPrefix) && (informative || len(r.sweeping) >= maxSweepingTracked) {
		r.n.marks.result(res)
	}
}

// maxSweepingTracked bounds the purges a session remembers as sweeping;
// past it every result is recorded.
const maxSweepingTracked = 1000

// missedPurgesBytes bounds the purges of one session message: a quarter
// of gRPC's default 4 MiB receive limit, leaving the snapshot room for its
// epoch and policies.
const missedPurgesBytes = 1 << 20

// purgeBatches cuts purges, in order, into batches of at most limit bytes
// encoded (a purge larger than limit alone in its batch). There is always
// at least one batch, maybe empty: the snapshot's.
func purgeBatches(purges []*pb.Purge, limit int) [][]*pb.Purge {
	var out [][]*pb.Purge
	start, size := 0, 0
	for i, p := range purges {
		// The field tag and length prefix of a repeated message: at most 6 bytes.
		n := proto.Size(p) + 6
		if size+n > limit && i > start {
			out = append(out, purges[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, purges[start:])
}

// recordChanged says what a change of the session's member record means:
// nil for none of its business, else the status to end the session with.
func (n *nodeService) recordChanged(ctx context.Context, ev *clientv3.Event, m *pb.Member, rev int64) error {
	id := m.GetId()
	if ev.Type == clientv3.EventTypeDelete {
		return sessionEnd(codes.FailedPrecondition, pb.SessionEnd_SESSION_END_RECORD_DELETED, "the member record of %s was deleted", id)
	}
	if ev.Kv.ModRevision == rev {
		return nil // its own write
	}
	if holds, err := n.state.holds(ctx, id, rev); err == nil && !holds {
		return sessionEnd(codes.Aborted, pb.SessionEnd_SESSION_END_SUPERSEDED, "a newer session of %s took the member over", id)
	}
	got := &pb.Member{}
	_ = proto.Unmarshal(ev.Kv.Value, got) // described best effort
	return sessionEnd(codes.FailedPrecondition, pb.SessionEnd_SESSION_END_RECORD_REPLACED,
		"the member record of %s was overwritten (peer address %q, this node's is %q)", id, got.GetPeerAddress(), m.GetPeerAddress())
}

// cleanupContext is for the etcd writes that end a session, which run
// whether or not its stream's context has ended, for 5 s at most.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}
