package controlplane

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A node drains itself (DrainRequest, from its preStop hook) with a drain
// record that names its process: "self <instance>". Like an operator's,
// it holds until UndrainNode; unlike one, it ends with the process, when
// the session leaves cleanly or another process of the id says hello, so
// that a restarted node owns keys again.

const selfDrainPrefix = "self "

// setSelfDrained records the drain of id by its process instance.
func (s *state) setSelfDrained(ctx context.Context, id, instance string) error {
	if _, err := s.kv.Put(ctx, s.drainKey(id), selfDrainPrefix+instance); err != nil {
		return etcdErr(err, "recording the drain of %s", id)
	}
	return nil
}

// clearSelfDrain deletes id's drain record if a process drained itself by
// it: the process instance (ended), or any but keep (a new process).
// An operator's drain record is left as it is.
func (s *state) clearSelfDrain(ctx context.Context, id, instance, keep string) error {
	resp, err := s.kv.Get(ctx, s.drainKey(id))
	if err != nil {
		return etcdErr(err, "reading the drain of %s", id)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	kv := resp.Kvs[0]
	by, self := strings.CutPrefix(string(kv.Value), selfDrainPrefix)
	if !self || (instance != "" && by != instance) || (keep != "" && by == keep) {
		return nil
	}
	// Only the record read: an operator's drain written since stays.
	_, err = s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.drainKey(id)), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(s.drainKey(id))).Commit()
	if err != nil {
		return etcdErr(err, "clearing the drain of %s", id)
	}
	return nil
}
