package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// state reads and writes shardcache's records in etcd. It holds no cache of
// its own: every replica sees the same etcd.
type state struct {
	kv     *clientv3.Client
	prefix string
	// forgetAbsent is how long a node unheard of is still waited for by
	// purges (Config.ForgetAbsentAfter).
	forgetAbsent time.Duration
	// historyMax is how many changes of the policy set are kept
	// (Config.PolicyHistory).
	historyMax int
}

// seenKey holds a node's status as last heard, bound to no lease: when the
// node's session and lease are gone it says when the node was last heard
// from and which purges it had applied, so that a purge reports a node cut
// off from the control plane as unreachable, not as absent. A node that
// leaves (goodbye) deletes it.
func (s *state) seenKey(id string) string { return s.prefix + "seen/" + id }
func (s *state) seenPrefix() string       { return s.prefix + "seen/" }

func (s *state) memberKey(id string) string { return s.prefix + "members/" + id }
func (s *state) statusKey(id string) string { return s.prefix + "status/" + id }
func (s *state) membersPrefix() string      { return s.prefix + "members/" }
func (s *state) statusPrefix() string       { return s.prefix + "status/" }
func (s *state) currentEpochKey() string    { return s.prefix + "epochs/current" }
func (s *state) electionPrefix() string     { return s.prefix + "leader/" }

// epochKey pads the number so that keys sort in epoch order.
func (s *state) epochKey(n uint64) string { return fmt.Sprintf("%sepochs/%020d", s.prefix, n) }

// sessionKey holds the instance (Hello.instance) of the process whose session
// for id is open, bound to the replica's lease; it is deleted when the
// stream ends, and its revision (the registration's) guards every write of
// the session.
func (s *state) sessionKey(id string) string { return s.prefix + "sessions/" + id }

// refusedKey holds the last refused hello for id (a RefusedSession).
func (s *state) refusedKey(id string) string { return s.prefix + "refused/" + id }
func (s *state) refusedPrefix() string       { return s.prefix + "refused/" }

// register makes instance the holder of the member's session and writes its
// member and status records, all bound to lease (the replica's), in one
// transaction. While another instance holds an open session for the id it
// fails with errSessionHeld, naming the holder; the same instance (a
// reconnect) takes its session over. It returns the revision of the write.
func (s *state) register(ctx context.Context, st *pb.Node, instance string, lease clientv3.LeaseID) (int64, error) {
	m := st.GetMember()
	mb, err := proto.Marshal(m)
	if err != nil {
		return 0, fmt.Errorf("encoding member %s: %w", m.GetId(), err)
	}
	sb, err := proto.Marshal(st)
	if err != nil {
		return 0, fmt.Errorf("encoding status of %s: %w", m.GetId(), err)
	}
	seen, err := seenRecord(st)
	if err != nil {
		return 0, err
	}
	key := s.sessionKey(m.GetId())
	for range 3 {
		resp, err := s.kv.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(s.statusKey(m.GetId()))).Commit()
		if err != nil {
			return 0, etcdErr(err, "reading the session of %s", m.GetId())
		}
		guard := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if string(kvs[0].Value) != instance {
				holder := &pb.Node{}
				if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
					_ = proto.Unmarshal(kvs[0].Value, holder) // the description is best effort
				}
				return 0, fmt.Errorf("%w (peer %s, replica %s, since %s)", errSessionHeld, holder.GetMember().GetPeerAddress(),
					holder.GetSessionReplica(), holder.GetMember().GetJoinedAt().AsTime().Format(time.RFC3339))
			}
			guard = clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)
		}
		tx, err := s.kv.Txn(ctx).If(guard).Then(
			clientv3.OpPut(key, instance, clientv3.WithLease(lease)),
			clientv3.OpPut(s.memberKey(m.GetId()), string(mb), clientv3.WithLease(lease)),
			clientv3.OpPut(s.statusKey(m.GetId()), string(sb), clientv3.WithLease(lease)),
			clientv3.OpPut(s.seenKey(m.GetId()), seen),
		).Commit()
		if err != nil {
			return 0, etcdErr(err, "registering member %s", m.GetId())
		}
		if tx.Succeeded {
			return tx.Header.Revision, nil
		}
	}
	return 0, fmt.Errorf("registering member %s: %w", m.GetId(), ErrSessionConflict)
}

// holds reports whether the session registered at rev still holds id's
// session (no newer registration replaced it).
func (s *state) holds(ctx context.Context, id string, rev int64) (bool, error) {
	resp, err := s.kv.Get(ctx, s.sessionKey(id))
	if err != nil {
		return false, etcdErr(err, "reading the session of %s", id)
	}
	return len(resp.Kvs) > 0 && resp.Kvs[0].ModRevision == rev, nil
}

// release ends the session registered at rev: its session key goes at
// once, so that a new process with the id is admitted, while the member
// record stays until expire removes it (a brief disconnect moves no keys).
// With drop, the member and status records go too.
//
// Unless the node left, what was last heard of it is written with the
// purge revision it had applied: purges wait for it, cut off, and know
// what it has.
func (s *state) release(ctx context.Context, id string, rev int64, drop, left bool, purgeRev int64) error {
	seen := clientv3.OpDelete(s.seenKey(id)) // gone on purpose: purges need not wait for it
	if !left {
		rec, err := seenRecord(&pb.Node{Member: &pb.Member{Id: id}, PurgeRevision: purgeRev})
		if err != nil {
			return err
		}
		seen = clientv3.OpPut(s.seenKey(id), rec)
	}
	if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.sessionKey(id)), "=", rev)).
		Then(seen).Commit(); err != nil {
		return etcdErr(err, "recording the end of the session of %s", id)
	}
	if drop {
		return s.expire(ctx, id, rev)
	}
	key := s.sessionKey(id)
	if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit(); err != nil {
		return etcdErr(err, "ending the session of %s", id)
	}
	return nil
}

// expire removes the records of id's session registered at rev, unless a
// newer session registered since: its session, member and status keys
// when the member record is still that session's; else (the record was
// deleted or overwritten by another writer) its session key and status
// record if the session key is still its own, and a status record no
// member record goes with.
func (s *state) expire(ctx context.Context, id string, rev int64) error {
	key, member, status := s.sessionKey(id), s.memberKey(id), s.statusKey(id)
	if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(member), "=", rev)).
		Then(clientv3.OpDelete(key), clientv3.OpDelete(member), clientv3.OpDelete(status)).
		Else(
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(status)}, nil),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(member), "=", 0)}, []clientv3.Op{clientv3.OpDelete(status)}, nil),
		).Commit(); err != nil {
		return etcdErr(err, "removing the records of %s", id)
	}
	return nil
}

// putStatus records a node's session state (replica, serving epoch, load,
// policy acks) under status/<id>, bound to the replica's lease, while the
// session registered at rev holds the id.
func (s *state) putStatus(ctx context.Context, st *pb.Node, lease clientv3.LeaseID, rev int64) error {
	b, err := proto.Marshal(st)
	if err != nil {
		return fmt.Errorf("encoding status of %s: %w", st.GetMember().GetId(), err)
	}
	id := st.GetMember().GetId()
	seen, err := seenRecord(st)
	if err != nil {
		return err
	}
	if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.sessionKey(id)), "=", rev)).
		Then(clientv3.OpPut(s.statusKey(id), string(b), clientv3.WithLease(lease)), clientv3.OpPut(s.seenKey(id), seen)).Commit(); err != nil {
		return etcdErr(err, "writing status of %s", id)
	}
	return nil
}

// seenRecord is what seenKey holds for a node's status: its id, the purge
// revision it applied, and now as when it was last heard from.
func seenRecord(st *pb.Node) (string, error) {
	b, err := proto.Marshal(&pb.Node{Member: &pb.Member{Id: st.GetMember().GetId()}, PurgeRevision: st.GetPurgeRevision(), LastReportAt: timestamppb.Now()})
	if err != nil {
		return "", fmt.Errorf("encoding what was last heard of %s: %w", st.GetMember().GetId(), err)
	}
	return string(b), nil
}

// refusedTTL is how long a refused hello stays listed.
const refusedTTL = 10 * time.Minute

// recordRefusal keeps r as id's last refused hello for refusedTTL: one
// record per id, replaced by the next.
func (s *state) recordRefusal(ctx context.Context, id string, r *pb.RefusedSession) error {
	b, err := proto.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding refusal of %s: %w", id, err)
	}
	lease, err := s.kv.Grant(ctx, int64(refusedTTL/time.Second))
	if err != nil {
		return etcdErr(err, "recording refusal of %s", id)
	}
	if _, err := s.kv.Put(ctx, s.refusedKey(id), string(b), clientv3.WithLease(lease.ID)); err != nil {
		return etcdErr(err, "recording refusal of %s", id)
	}
	return nil
}

// refusals returns the recorded refused hellos, by id.
func (s *state) refusals(ctx context.Context) (map[string]*pb.RefusedSession, error) {
	return byID(ctx, s, s.refusedPrefix(), "refused session", func() *pb.RefusedSession { return &pb.RefusedSession{} })
}

// byID reads every record under prefix, keyed by the id that follows it;
// what names the records in errors.
func byID[T proto.Message](ctx context.Context, s *state, prefix, what string, newT func() T) (map[string]T, error) {
	resp, err := s.kv.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(err, "reading %s records", what)
	}
	out := make(map[string]T, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		v := newT()
		if err := proto.Unmarshal(kv.Value, v); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", what, kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), prefix)] = v
	}
	return out, nil
}

// members returns every registered member sorted by id, and the revision read.
func (s *state) members(ctx context.Context) ([]*pb.Member, int64, error) {
	resp, err := s.kv.Get(ctx, s.membersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, etcdErr(err, "reading members")
	}
	out := make([]*pb.Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m := &pb.Member{}
		if err := proto.Unmarshal(kv.Value, m); err != nil {
			return nil, 0, fmt.Errorf("decoding member %s: %w", kv.Key, err)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *pb.Member) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out, resp.Header.Revision, nil
}

// statuses returns the stored session status of every node, by id.
func (s *state) statuses(ctx context.Context) (map[string]*pb.Node, error) {
	return byID(ctx, s, s.statusPrefix(), "node status", func() *pb.Node { return &pb.Node{} })
}

// currentEpoch returns the current epoch (nil before the first) and the mod
// revision of its record, which writeEpoch compares against.
func (s *state) currentEpoch(ctx context.Context) (*pb.RingEpoch, int64, error) {
	resp, err := s.kv.Get(ctx, s.currentEpochKey())
	if err != nil {
		return nil, 0, etcdErr(err, "reading current epoch")
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	e, err := decodeEpoch(resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	return e, resp.Kvs[0].ModRevision, nil
}

// epoch returns epoch n from the kept history.
func (s *state) epoch(ctx context.Context, n uint64) (*pb.RingEpoch, error) {
	resp, err := s.kv.Get(ctx, s.epochKey(n))
	if err != nil {
		return nil, etcdErr(err, "reading epoch %d", n)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %d (only the last epochs are kept)", ErrEpochNotFound, n)
	}
	return decodeEpoch(resp.Kvs[0].Value)
}

// writeEpoch makes next the current epoch if the current record is still at
// prevRev and every guard holds (the leader passes its election key), and
// drops the epoch that falls out of the kept history.
func (s *state) writeEpoch(ctx context.Context, next *pb.RingEpoch, prevRev int64, kept int, guards ...clientv3.Cmp) error {
	b, err := proto.Marshal(next)
	if err != nil {
		return fmt.Errorf("encoding epoch %d: %w", next.GetEpoch(), err)
	}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.currentEpochKey()), "=", prevRev)}, guards...)
	ops := []clientv3.Op{
		clientv3.OpPut(s.currentEpochKey(), string(b)),
		clientv3.OpPut(s.epochKey(next.GetEpoch()), string(b)),
	}
	if next.GetEpoch() > uint64(kept) {
		ops = append(ops, clientv3.OpDelete(s.epochKey(next.GetEpoch()-uint64(kept))))
	}
	resp, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return etcdErr(err, "writing epoch %d", next.GetEpoch())
	}
	if !resp.Succeeded {
		return fmt.Errorf("writing epoch %d: %w", next.GetEpoch(), ErrEpochConflict)
	}
	return nil
}

func decodeEpoch(b []byte) (*pb.RingEpoch, error) {
	e := &pb.RingEpoch{}
	if err := proto.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("decoding epoch: %w", err)
	}
	return e, nil
}

// Drain records: drain/<id> marks a node drained, apart from its
// lease-bound member record.
func (s *state) drainKey(id string) string { return s.prefix + "drain/" + id }
func (s *state) drainPrefix() string       { return s.prefix + "drain/" }

// setDrained records or clears a drain; it outlives the node's session.
func (s *state) setDrained(ctx context.Context, id string, drained bool) error {
	var err error
	if drained {
		_, err = s.kv.Put(ctx, s.drainKey(id), "")
	} else {
		_, err = s.kv.Delete(ctx, s.drainKey(id))
	}
	if err != nil {
		return etcdErr(err, "recording drain of %s", id)
	}
	return nil
}

// drained returns the ids of drained nodes.
func (s *state) drained(ctx context.Context) (map[string]bool, error) {
	resp, err := s.kv.Get(ctx, s.drainPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcdErr(err, "reading drains")
	}
	out := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), s.drainPrefix())] = true
	}
	return out, nil
}

// etcdErr names the step that etcd failed and marks the error as ErrEtcd.
func etcdErr(err error, format string, args ...any) error {
	return fmt.Errorf(format+": %w: %w", append(args, ErrEtcd, err)...)
}

// Purges are recorded under purges/<request id>; their mod revision orders
// them, and nodes apply them in that order. Each node's acknowledgement is
// kept under purge-acks/<request id>/<node>. The leader deletes records past
// the retention and keeps, in purges-floor, the newest purge it deleted: a
// node that has not applied it missed purges that are gone, and must drop
// everything it stored before it reconnects.
func (s *state) purgesPrefix() string             { return s.prefix + "purges/" }
func (s *state) purgeKey(id string) string        { return s.prefix + "purges/" + id }
func (s *state) purgeFloorKey() string            { return s.prefix + "purges-floor" }
func (s *state) purgeAcksPrefix(id string) string { return s.prefix + "purge-acks/" + id + "/" }
func (s *state) purgeAckKey(id, node string) string {
	return s.purgeAcksPrefix(id) + node
}

// recordPurge stores p under its request id, unless the id is recorded
// already: then the recorded purge is returned if it is the same purge, and
// ErrPurgeConflict if not. The returned purge carries its revision.
func (s *state) recordPurge(ctx context.Context, p *pb.Purge) (*pb.Purge, error) {
	b, err := proto.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding purge %s: %w", p.GetId(), err)
	}
	key := s.purgeKey(p.GetId())
	resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, etcdErr(err, "recording purge %s", p.GetId())
	}
	if resp.Succeeded {
		out := proto.Clone(p).(*pb.Purge)
		out.Revision = resp.Header.Revision
		return out, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, fmt.Errorf("%w: recording purge %s raced with its deletion", ErrEtcd, p.GetId())
	}
	old, err := decodePurge(kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		return nil, err
	}
	if !samePurge(old, p) {
		return nil, fmt.Errorf("%w: %s was %s", ErrPurgeConflict, p.GetId(), describePurge(old))
	}
	return old, nil
}

func samePurge(a, b *pb.Purge) bool {
	return a.GetKind() == b.GetKind() && a.GetUrl() == b.GetUrl() && a.GetKey() == b.GetKey() && a.GetSoft() == b.GetSoft() &&
		a.GetHost() == b.GetHost() && a.GetPathPrefix() == b.GetPathPrefix() && a.GetTag() == b.GetTag()
}

// describePurge names what a purge matches, for messages.
func describePurge(p *pb.Purge) string {
	if p.GetSoft() {
		return "a soft" + strings.TrimPrefix(describePurge(&pb.Purge{Kind: p.GetKind(), Url: p.GetUrl(), Key: p.GetKey(),
			PathPrefix: p.GetPathPrefix(), Host: p.GetHost(), Tag: p.GetTag()}), "a")
	}
	switch p.GetKind() {
	case pb.PurgeKind_PURGE_KIND_URL:
		if p.GetKey() != "" {
			return "a purge of key " + p.GetKey()
		}
		return "a purge of " + p.GetUrl()
	case pb.PurgeKind_PURGE_KIND_PREFIX:
		return "a purge of prefix " + p.GetPathPrefix() + hostScope(p.GetHost())
	default:
		return "a purge of tag " + p.GetTag()
	}
}

// decodePurge decodes a purge record; rev, the record's mod revision, is
// its revision (the floor, 0, keeps the revision it holds).
func decodePurge(b []byte, rev int64) (*pb.Purge, error) {
	p := &pb.Purge{}
	if err := proto.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("decoding purge: %w", err)
	}
	if rev != 0 {
		p.Revision = rev
	}
	return p, nil
}

// purge returns the recorded purge with request id id.
func (s *state) purge(ctx context.Context, id string) (*pb.Purge, error) {
	resp, err := s.kv.Get(ctx, s.purgeKey(id))
	if err != nil {
		return nil, etcdErr(err, "reading purge %s", id)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %q (never recorded, or older than the retention)", ErrPurgeNotFound, id)
	}
	return decodePurge(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// purges returns every recorded purge in revision order, the floor, and the
// revision read at.
func (s *state) purges(ctx context.Context) ([]*pb.Purge, *pb.Purge, int64, error) {
	resp, err := s.kv.Get(ctx, s.purgesPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		return nil, nil, 0, etcdErr(err, "reading purges")
	}
	out := make([]*pb.Purge, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		p, err := decodePurge(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, nil, 0, err
		}
		out = append(out, p)
	}
	fresp, err := s.kv.Get(ctx, s.purgeFloorKey(), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, nil, 0, etcdErr(err, "reading the purge floor")
	}
	var floor *pb.Purge
	if len(fresp.Kvs) > 0 {
		if floor, err = decodePurge(fresp.Kvs[0].Value, 0); err != nil {
			return nil, nil, 0, err
		}
	}
	return out, floor, resp.Header.Revision, nil
}
