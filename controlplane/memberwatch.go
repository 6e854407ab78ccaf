package controlplane

import (
	"context"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// memberWatch is a replica's one watch of the member records. It tells each
// of its sessions when the session's record is deleted or written by
// anything but the session's own registration, so that a thousand sessions
// cost one etcd watch, not a thousand (and no goroutine each).
type memberWatch struct {
	st *state // its keys and etcd client

	mu   sync.Mutex
	subs map[string][]*memberSub // by member id; a few at most per id
}

// memberSub is one session's subscription: the revision of its registration
// and where the first change after it goes.
type memberSub struct {
	rev int64
	ch  chan *clientv3.Event // buffered 1: the first change ends the session
}

func newMemberWatch(st *state) *memberWatch {
	return &memberWatch{st: st, subs: map[string][]*memberSub{}}
}

// subscribe returns where the first change of id's member record after
// revision rev arrives, and how to stop. A change made before the
// subscription (between the registration and this call) arrives too: the
// record is read once the subscription is in place.
func (w *memberWatch) subscribe(ctx context.Context, id string, rev int64) (<-chan *clientv3.Event, func(), error) {
	sub := &memberSub{rev: rev, ch: make(chan *clientv3.Event, 1)}
	w.mu.Lock()
	w.subs[id] = append(w.subs[id], sub)
	w.mu.Unlock()
	stop := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		subs := w.subs[id]
		for i, s := range subs {
			if s == sub {
				subs = append(subs[:i], subs[i+1:]...)
				break
			}
		}
		if len(subs) == 0 {
			delete(w.subs, id)
		} else {
			w.subs[id] = subs
		}
	}
	resp, err := w.st.kv.Get(ctx, w.st.memberKey(id))
	if err != nil {
		stop()
		return nil, nil, err
	}
	sub.check(w.st.memberKey(id), resp.Kvs, resp.Header.Revision)
	return sub.ch, stop, nil
}

// check compares the record as read at revision at (kvs: none, or the
// record) with the subscription, and reports a change.
func (s *memberSub) check(key string, kvs []*mvccpb.KeyValue, at int64) {
	if at <= s.rev {
		return
	}
	if len(kvs) == 0 {
		s.notify(&clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: at}})
		return
	}
	if kvs[0].ModRevision != s.rev {
		s.notify(&clientv3.Event{Type: clientv3.EventTypePut, Kv: kvs[0]})
	}
}

func (s *memberSub) notify(ev *clientv3.Event) {
	select {
	case s.ch <- ev:
	default: // one is waiting already; the session ends on it
	}
}

// load reads every member record and checks each subscription against it:
// on start, and whenever the watch breaks (a compaction may have taken
// changes it did not deliver). It returns the revision read at.
func (w *memberWatch) load(ctx context.Context) (int64, error) {
	resp, err := w.st.kv.Get(ctx, w.st.membersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	byKey := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		byKey[string(kv.Key)] = kv
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, subs := range w.subs {
		var kvs []*mvccpb.KeyValue
		if kv := byKey[w.st.memberKey(id)]; kv != nil {
			kvs = append(kvs, kv)
		}
		for _, s := range subs {
			s.check(w.st.memberKey(id), kvs, resp.Header.Revision)
		}
	}
	return resp.Header.Revision, nil
}

// apply hands each event to the subscriptions of its member made before it.
func (w *memberWatch) apply(evs []*clientv3.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		for _, s := range w.subs[strings.TrimPrefix(string(ev.Kv.Key), w.st.membersPrefix())] {
			if ev.Kv.ModRevision > s.rev {
				s.notify(ev)
			}
		}
	}
}
