package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// lead campaigns for leadership and, while leader, writes epochs. It returns
// when ctx ends.
func (s *Server) lead(ctx context.Context) error {
	for ctx.Err() == nil {
		err := s.term(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("leader term ended; campaigning again", "err", err)
		if !sleepCtx(ctx, time.Second) {
			return nil
		}
	}
	return nil
}

// term is one campaign and, if won, one term as leader.
func (s *Server) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(s.etcd, concurrency.WithTTL(int(s.cfg.LeaseTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, s.state.electionPrefix())
	// A campaign cancelled while it waits resigns with the etcd client's
	// own context, which nothing bounds: with etcd unreachable it would
	// hold the replica's stop until the client closes, which comes after.
	// So the wait for it ends with ctx; the campaign itself ends when the
	// client closes, and the session's lease expires with its TTL.
	won := make(chan error, 1)
	go func() { won <- el.Campaign(ctx, s.cfg.ReplicaID) }()
	select {
	case err := <-won:
		if err != nil {
			return fmt.Errorf("campaign: %w", err)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	s.log.Info("elected leader; writing ring epochs")
	s.isLeader.Store(true)
	defer s.isLeader.Store(false)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = el.Resign(rctx)
		cancel()
	}()
	// Only the holder of this exact election key may write: if the session
	// expired and another replica won, the comparison fails.
	guard := clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())
	// The term's compaction ends with it, before a next term can start one.
	tctx, endTerm := context.WithCancel(ctx)
	var compacting sync.WaitGroup
	compacting.Go(func() { s.compactPurges(tctx, guard) })
	defer func() {
		endTerm()
		compacting.Wait()
	}()
	return s.writeEpochs(ctx, sess.Done(), guard)
}

// writeEpochs turns membership changes into epochs until ctx ends or done
// closes. The first change opens a batch window; every change inside it is
// part of the same epoch.
func (s *Server) writeEpochs(ctx context.Context, done <-chan struct{}, guard clientv3.Cmp) error {
	var window <-chan time.Time
	openWindow := func() {
		if window == nil {
			window = time.After(s.cfg.EpochBatchWindow)
		}
	}
	// A new leader of a running cluster reconciles at once: a change may
	// already have waited for the previous leader's lease to expire. A new
	// cluster waits one window, so the first nodes make one epoch.
	if cur, _, err := s.state.currentEpoch(ctx); err == nil && cur != nil {
		window = time.After(0)
	} else {
		openWindow()
	}
	// Watches start right after a revision read now, so no change between
	// the reconciliation's read and the watches' start can be missed.
	watch := func() (members, drains clientv3.WatchChan, err error) {
		resp, err := s.etcd.Get(ctx, s.state.membersPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, nil, etcdErr(err, "reading the revision to watch from")
		}
		from := clientv3.WithRev(resp.Header.Revision + 1)
		members = s.etcd.Watch(clientv3.WithRequireLeader(ctx), s.state.membersPrefix(), clientv3.WithPrefix(), from)
		drains = s.etcd.Watch(clientv3.WithRequireLeader(ctx), s.state.drainPrefix(), clientv3.WithPrefix(), from)
		return members, drains, nil
	}
	members, drains, err := watch()
	if err != nil {
		return err
	}
	ramps := map[string]time.Time{} // members ramping up, by when they joined
	rewatch := func() bool {
		// Missed events are harmless: reconciliation reads the full member
		// list. Watch again from now and reconcile.
		for {
			if !sleepCtx(ctx, 500*time.Millisecond) {
				return false
			}
			if m, d, err := watch(); err == nil {
				members, drains = m, d
				openWindow()
				return true
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			return errLostLeadership
		case wr, ok := <-members:
			if (!ok || wr.Err() != nil) && !rewatch() {
				return nil
			}
			openWindow()
		case wr, ok := <-drains:
			if (!ok || wr.Err() != nil) && !rewatch() {
				return nil
			}
			openWindow()
		case <-window:
			window = nil
			wake, err := s.reconcile(ctx, guard, ramps)
			if err != nil {
				if errors.Is(err, ErrEpochConflict) {
					return err
				}
				s.log.Warn("writing epoch failed; retrying", "err", err)
				window = time.After(time.Second)
			} else if wake > 0 {
				window = time.After(wake) // a ramp's next step
			}
		}
	}
}

// reconcile writes a new epoch if the registered members (their weights
// ramped) differ from the current epoch's. It returns when to reconcile
// again for a ramp's next step, 0 when no member ramps.
func (s *Server) reconcile(ctx context.Context, guard clientv3.Cmp, ramps map[string]time.Time) (time.Duration, error) {
	members, _, err := s.state.members(ctx)
	if err != nil {
		return 0, err
	}
	drained, err := s.state.drained(ctx)
	if err != nil {
		return 0, err
	}
	cur, rev, err := s.state.currentEpoch(ctx)
	if err != nil {
		return 0, err
	}
	want := ringMembers(members, drained)
	wake := rampWeights(want, cur, ramps, s.cfg.Rampup, time.Now())
	if cur != nil && sameMembers(cur.GetMembers(), want) {
		return wake, nil
	}
	if cur == nil && len(want) == 0 {
		return 0, nil
	}
	next := &pb.RingEpoch{
		Epoch:         cur.GetEpoch() + 1,
		Members:       want,
		CreatedAt:     timestamppb.Now(),
		PreviousEpoch: cur.GetEpoch(),
		Reason:        describeChange(cur.GetMembers(), want),
	}
	if err := s.state.writeEpoch(ctx, next, rev, s.cfg.EpochsKept, guard); err != nil {
		return 0, err
	}
	s.epochsWritten.Add(1)
	s.log.Info("wrote ring epoch", "epoch", next.GetEpoch(), "members", len(want), "reason", next.GetReason())
	return wake, nil
}

// rampSteps is how many epochs a joining member's weight takes to reach
// its full value.
const rampSteps = 4

// rampWeights ramps up the members of want that joined a running ring
// within rampup (ramps records when, and forgets those done or gone): while
// one ramps, every weight is scaled by rampSteps and the ramping member's
// by its step instead. Scaling every weight alike changes no key's owner,
// so only the ramping member gains keys at each step. It returns the time
// to the next step, 0 when none ramps.
func rampWeights(want []*pb.Member, cur *pb.RingEpoch, ramps map[string]time.Time, rampup time.Duration, now time.Time) time.Duration {
	inRing := make(map[string]bool, len(cur.GetMembers()))
	for _, m := range cur.GetMembers() {
		inRing[m.GetId()] = true
	}
	wanted := make(map[string]bool, len(want))
	for _, m := range want {
		wanted[m.GetId()] = true
		if rampup > 0 && len(inRing) > 0 && !inRing[m.GetId()] {
			if _, ok := ramps[m.GetId()]; !ok {
				ramps[m.GetId()] = now
			}
		}
	}
	stepLen := rampup / rampSteps
	var wake time.Duration
	for id, since := range ramps {
		if !wanted[id] || rampup <= 0 || now.Sub(since) >= rampup-stepLen {
			delete(ramps, id) // gone, or at its last step: its full weight
			continue
		}
		next := stepLen - now.Sub(since)%stepLen
		if wake == 0 || next < wake {
			wake = next
		}
	}
	if len(ramps) == 0 {
		return 0
	}
	for _, m := range want {
		w := max(m.GetWeight(), 1) // 0 means 1
		step := uint32(rampSteps)
		if since, ok := ramps[m.GetId()]; ok {
			step = uint32(now.Sub(since)/stepLen) + 1
		}
		m.Weight = w * step
	}
	return wake
}

// ringMembers selects the members that own keys (active, not drained) and
// keeps only the fields that define the ring, and where each member's
// ops listener is (so that any node can tell cachectl where its peers'
// are), so a reconnect (new joined_at) is not a change.
func ringMembers(registered []*pb.Member, drained map[string]bool) []*pb.Member {
	out := make([]*pb.Member, 0, len(registered))
	for _, m := range registered {
		if m.GetState() != pb.MemberState_MEMBER_STATE_ACTIVE || drained[m.GetId()] {
			continue
		}
		out = append(out, &pb.Member{
			Id:          m.GetId(),
			PeerAddress: m.GetPeerAddress(),
			PublicUrl:   m.GetPublicUrl(),
			Weight:      m.GetWeight(),
			State:       m.GetState(),
			Zone:        m.GetZone(),
			OpsUrl:      m.GetOpsUrl(),
		})
	}
	slices.SortFunc(out, func(a, b *pb.Member) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out
}

func sameMembers(a, b []*pb.Member) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.Member) bool { return proto.Equal(x, y) })
}

// describeChange names the members that joined, left or changed.
func describeChange(old, next []*pb.Member) string {
	byID := make(map[string]*pb.Member, len(old))
	for _, m := range old {
		byID[m.GetId()] = m
	}
	var parts []string
	for _, m := range next {
		prev, ok := byID[m.GetId()]
		switch {
		case !ok:
			parts = append(parts, "+"+m.GetId())
		case !proto.Equal(prev, m):
			parts = append(parts, "~"+m.GetId())
		}
		delete(byID, m.GetId())
	}
	for id := range byID {
		parts = append(parts, "-"+id)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// compactPurges deletes, while this replica leads, the purges older than
// the retention and those past the most kept, with their acknowledgements,
// and raises the floor to the newest deleted.
func (s *Server) compactPurges(ctx context.Context, guard clientv3.Cmp) {
	t := time.NewTicker(s.cfg.PurgeCompactInterval)
	defer t.Stop()
	for {
		if err := s.compactPurgesOnce(ctx, guard); err != nil && ctx.Err() == nil {
			s.log.Warn("compacting purges; retrying later", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) compactPurgesOnce(ctx context.Context, guard clientv3.Cmp) error {
	// The replica's view of the purges, current through its watch, names
	// those to delete: the leader reads no retained purge from etcd. A
	// batch is deleted only if every purge in it is still recorded at the
	// revision the view has, so a view behind an earlier compaction
	// deletes nothing twice and never lowers the floor (every purge still
	// recorded is newer than the floor).
	old := s.purgeHub.expired(s.cfg.PurgeMaxRecords, time.Now().Add(-s.cfg.PurgeRetention))
	for len(old) > 0 {
		batch := old[:min(len(old), 32)] // etcd caps the operations of one transaction
		newest := batch[len(batch)-1]
		floor, _ := proto.Marshal(&pb.Purge{Id: newest.id, CreatedAt: timestamppb.New(time.Unix(0, newest.created)), Revision: newest.rev})
		ops := []clientv3.Op{clientv3.OpPut(s.state.purgeFloorKey(), string(floor))}
		recorded := make([]clientv3.Cmp, 0, len(batch))
		for _, p := range batch {
			key := s.state.purgeKey(p.id)
			recorded = append(recorded, clientv3.Compare(clientv3.ModRevision(key), "=", p.rev))
			ops = append(ops, clientv3.OpDelete(key), clientv3.OpDelete(s.state.purgeAcksPrefix(p.id), clientv3.WithPrefix()))
		}
		resp, err := s.etcd.Txn(ctx).If(guard).Then(clientv3.OpTxn(recorded, ops, nil)).Commit()
		if err != nil {
			return etcdErr(err, "deleting old purges")
		}
		if !resp.Succeeded {
			return errLostLeadership
		}
		if !resp.Responses[0].GetResponseTxn().GetSucceeded() {
			s.log.Info("the purge view is behind etcd; compacting at the next round")
			return nil
		}
		s.log.Info("deleted old purges", "count", len(batch), "floor_revision", newest.rev)
		old = old[len(batch):]
	}
	return nil
}
