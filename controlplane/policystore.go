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

// Policy records: policies/<name> holds a CachePolicy; policies-revision is
// rewritten in the same transaction as every policy change, so its mod
// revision is the revision of the whole set. Each change also writes a
// policy-history/<time> record, a PolicyHistoryEntry holding what it
// replaced, in the same transaction: the history cannot miss a change.
func (s *state) policiesPrefix() string       { return s.prefix + "policies" }
func (s *state) policyKey(name string) string { return s.prefix + "policies/" + name }
func (s *state) policyRevKey() string         { return s.prefix + "policies-revision" }
func (s *state) policyHistoryPrefix() string  { return s.prefix + "policy-history/" }

// policyWriteAttempts bounds the retries of a change whose read of the
// set was overtaken by another change.
const policyWriteAttempts = 5

// policyChange is a change of the set: policies to write, names to delete.
type policyChange struct {
	puts    []*pb.CachePolicy
	deletes []string
	action  string // apply, delete, rollback
	// rolledBackTo is the revision a rollback restores.
	rolledBackTo int64
	// ifRevision, when set, is the revision of the set the change was
	// computed from: another revision is a conflict, not a retry.
	ifRevision int64
}

// changePolicies writes a change and its history record in one
// transaction, made on the set as read just before (compare-and-swap on
// the set's revision). A put equal to the stored policy is no change; a
// change of nothing writes nothing. It returns the set's revision after
// it, and the policies left as they were with their revisions.
func (s *state) changePolicies(ctx context.Context, ch policyChange) (int64, map[string]int64, error) {
	for range policyWriteAttempts {
		current, rev, _, err := s.policies(ctx)
		if err != nil {
			return 0, nil, err
		}
		if ch.ifRevision != 0 && rev != ch.ifRevision {
			return 0, nil, ErrPolicyConflict
		}
		stored := make(map[string]*pb.CachePolicy, len(current))
		for _, p := range current {
			stored[p.GetName()] = p
		}
		unchanged := map[string]int64{}
		entry := &pb.PolicyHistoryEntry{Action: ch.action, At: timestamppb.Now(), RolledBackTo: ch.rolledBackTo}
		var ops []clientv3.Op
		for _, p := range ch.puts {
			p = proto.Clone(p).(*pb.CachePolicy)
			p.Revision = 0 // the record's mod revision is the truth
			before := stored[p.GetName()]
			if before != nil {
				if samePolicy(before, p) {
					unchanged[p.GetName()] = before.GetRevision()
					continue
				}
				before = proto.Clone(before).(*pb.CachePolicy)
				before.Revision = 0
			}
			b, err := proto.Marshal(p)
			if err != nil {
				return 0, nil, fmt.Errorf("encoding policy %s: %w", p.GetName(), err)
			}
			ops = append(ops, clientv3.OpPut(s.policyKey(p.GetName()), string(b)))
			entry.Changes = append(entry.Changes, &pb.PolicyChange{Name: p.GetName(), Before: before})
		}
		for _, name := range ch.deletes {
			before := stored[name]
			if before == nil {
				return 0, nil, fmt.Errorf("%w: %s", ErrPolicyNotFound, quoteCut(name))
			}
			before = proto.Clone(before).(*pb.CachePolicy)
			before.Revision = 0
			ops = append(ops, clientv3.OpDelete(s.policyKey(name)))
			entry.Changes = append(entry.Changes, &pb.PolicyChange{Name: name, Before: before})
		}
		if len(ops) == 0 {
			return rev, unchanged, nil
		}
		record, err := proto.Marshal(entry)
		if err != nil {
			return 0, nil, fmt.Errorf("encoding policy history: %w", err)
		}
		historyKey := fmt.Sprintf("%s%020d", s.policyHistoryPrefix(), time.Now().UnixNano())
		ops = append(ops, clientv3.OpPut(s.policyRevKey(), ""), clientv3.OpPut(historyKey, string(record)))
		resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.policyRevKey()), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return 0, nil, etcdErr(err, "writing %d policy changes", len(entry.Changes))
		}
		if !resp.Succeeded {
			continue // another change came between the read and the write
		}
		s.trimPolicyHistory(ctx)
		return resp.Header.Revision, unchanged, nil
	}
	return 0, nil, ErrPolicyConflict
}

// samePolicy compares two policies apart from their revisions.
func samePolicy(a, b *pb.CachePolicy) bool {
	a, b = proto.Clone(a).(*pb.CachePolicy), proto.Clone(b).(*pb.CachePolicy)
	a.Revision, b.Revision = 0, 0
	return proto.Equal(a, b)
}

// trimPolicyHistory deletes the oldest history records beyond the bound.
// A failure leaves them for the next change to delete.
func (s *state) trimPolicyHistory(ctx context.Context) {
	resp, err := s.kv.Get(ctx, s.policyHistoryPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) <= s.historyMax {
		return
	}
	for _, kv := range resp.Kvs[:len(resp.Kvs)-s.historyMax] {
		if _, err := s.kv.Delete(ctx, string(kv.Key)); err != nil {
			return
		}
	}
}

// policyHistory returns the kept changes, newest first, each change with
// the policy after it filled in, and the set's current revision.
func (s *state) policyHistory(ctx context.Context) ([]*pb.PolicyHistoryEntry, int64, error) {
	current, rev, at, err := s.policies(ctx)
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.kv.Get(ctx, s.policyHistoryPrefix(), clientv3.WithPrefix(), clientv3.WithRev(at),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
	if err != nil {
		return nil, 0, etcdErr(err, "reading the policy history")
	}
	// Walking back from the current set, the policy after a change is the
	// one before the next (newer) change of it, or the current one.
	after := make(map[string]*pb.CachePolicy, len(current))
	for _, p := range current {
		after[p.GetName()] = p
	}
	out := make([]*pb.PolicyHistoryEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e := &pb.PolicyHistoryEntry{}
		if err := proto.Unmarshal(kv.Value, e); err != nil {
			return nil, 0, fmt.Errorf("decoding policy history %s: %w", kv.Key, err)
		}
		e.Revision = kv.CreateRevision
		for _, c := range e.GetChanges() {
			if a := after[c.GetName()]; a != nil {
				c.After = proto.Clone(a).(*pb.CachePolicy)
				c.After.Revision = e.Revision
			}
			if c.Before != nil {
				after[c.GetName()] = c.GetBefore()
			} else {
				delete(after, c.GetName())
			}
		}
		out = append(out, e)
	}
	return out, rev, nil
}

// rollbackChange is the change that restores the set as it was at rev:
// each policy changed since is put back as it was before its first change
// after rev, or deleted if it did not exist then.
func rollbackChange(entries []*pb.PolicyHistoryEntry, current int64, rev int64) (policyChange, error) {
	ch := policyChange{action: "rollback", rolledBackTo: rev}
	if rev > current || rev < 1 {
		return ch, fmt.Errorf("%w: %d: the current revision is %d", ErrRevisionNotKept, rev, current)
	}
	// entries are newest first; the oldest kept one is the last.
	if n := len(entries); rev < current && (n == 0 || rev < entries[n-1].GetRevision()) {
		oldest := "none is kept"
		if n > 0 {
			oldest = fmt.Sprintf("the oldest kept is %d", entries[n-1].GetRevision())
		}
		return ch, fmt.Errorf("%w: %d is older than the history (%s)", ErrRevisionNotKept, rev, oldest)
	}
	then := map[string]*pb.CachePolicy{}
	seen := map[string]bool{}
	for i := len(entries) - 1; i >= 0; i-- { // oldest first: the first change after rev wins
		e := entries[i]
		if e.GetRevision() <= rev {
			continue
		}
		for _, c := range e.GetChanges() {
			if !seen[c.GetName()] {
				seen[c.GetName()], then[c.GetName()] = true, c.GetBefore()
			}
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if p := then[name]; p != nil {
			ch.puts = append(ch.puts, p)
		} else {
			ch.deletes = append(ch.deletes, name)
		}
	}
	return ch, nil
}

// policies returns every policy sorted by name, the set's revision, and the
// etcd revision read at.
func (s *state) policies(ctx context.Context) ([]*pb.CachePolicy, int64, int64, error) {
	resp, err := s.kv.Get(ctx, s.policiesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, 0, etcdErr(err, "reading policies")
	}
	var out []*pb.CachePolicy
	var rev int64
	for _, kv := range resp.Kvs {
		if string(kv.Key) == s.policyRevKey() {
			rev = kv.ModRevision
			continue
		}
		if !strings.HasPrefix(string(kv.Key), s.policiesPrefix()+"/") {
			continue
		}
		p, err := decodePolicy(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, 0, 0, err
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *pb.CachePolicy) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, rev, resp.Header.Revision, nil
}

func decodePolicy(b []byte, rev int64) (*pb.CachePolicy, error) {
	p := &pb.CachePolicy{}
	if err := proto.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("decoding policy: %w", err)
	}
	p.Revision = rev
	return p, nil
}
