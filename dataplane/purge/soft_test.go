package purge

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A soft ban marks what it matches stale and removes nothing: Match (what
// may not be served) ignores it, Stale finds it; a hard ban on the same URL
// is not hidden by a soft one installed later.
func TestSoftBansMarkStaleAndRemoveNothing(t *testing.T) {
	s := New()
	at := time.Now()
	add := func(p *pb.Purge, when time.Time) {
		b, err := NewBan(p, when.UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		s.Add(b, p.GetRevision())
	}
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "t", Soft: true, Revision: 1}, at)
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://h/hard", Revision: 2}, at)
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://h/hard", Soft: true, Revision: 3}, at.Add(time.Second))
	before := at.Add(-time.Second)
	tagged := &store.Entry{URL: "h/a", Received: before, Header: http.Header{"Surrogate-Key": {"t"}}}
	if s.Match(tagged) != nil || s.Stale(tagged) == nil {
		t.Fatal("a soft tag ban: want stale, not removed")
	}
	if after := (&store.Entry{URL: "h/a", Received: at.Add(time.Millisecond), Header: tagged.Header}); s.Stale(after) != nil {
		t.Fatal("an object received after the soft ban is stale")
	}
	// Received after the soft ban, though its Date (a second's precision)
	// says a little before: fresh.
	if refetched := (&store.Entry{URL: "h/a", Received: at.Add(time.Millisecond), InitialAge: 900 * time.Millisecond, Header: tagged.Header}); s.Stale(refetched) != nil {
		t.Fatal("the refetch after a soft purge is taken for stale")
	}
	if hard := (&store.Entry{URL: "h/hard", Received: before}); s.Match(hard) == nil {
		t.Fatal("a soft ban hid the hard ban of the same URL")
	}
}

// memIndex is a map as the sweep sees a store.
type memIndex struct {
	mu sync.Mutex
	m  map[string]*store.Entry
}

func (x *memIndex) Keys(fn func(string) bool) {
	x.mu.Lock()
	keys := make([]string, 0, len(x.m))
	for k := range x.m {
		keys = append(keys, k)
	}
	x.mu.Unlock()
	for _, k := range keys {
		if !fn(k) {
			return
		}
	}
}

func (x *memIndex) Peek(k string) (*store.Entry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.m[k]
	return e, ok
}

func (x *memIndex) Delete(k string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.m[k]
	delete(x.m, k)
	return ok
}

// The sweep keeps what a soft ban matches, and the ban while it matches
// something younger than SoftHold; past SoftHold it removes what it still
// matches, and the ban goes.
func TestTheSweepKeepsSoftPurgedObjectsForSoftHold(t *testing.T) {
	now := time.Now()
	idx := &memIndex{m: map[string]*store.Entry{
		"young": {URL: "h/young", Received: now.Add(-time.Minute)},
		"old":   {URL: "h/old", Received: now.Add(-2 * SoftHold)},
	}}
	s := New()
	young, _ := NewBan(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://h/young", Soft: true, Revision: 1}, now.UnixNano())
	old, _ := NewBan(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://h/old", Soft: true, Revision: 2}, now.Add(-SoftHold-time.Second).UnixNano())
	s.Add(young, 1)
	s.Add(old, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	swept := make(chan []*Ban, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Sweep(ctx, s, idx, &Inflight{}, func(b []*Ban) { swept <- b })
	}()
	s.Wake <- struct{}{}
	got := <-swept
	cancel()
	<-done
	if len(got) != 1 || got[0] != old {
		t.Fatalf("the sweep dropped %v, want only the ban past SoftHold", got)
	}
	if _, ok := idx.Peek("young"); !ok {
		t.Fatal("the sweep removed an object a soft ban marked stale")
	}
	if _, ok := idx.Peek("old"); ok || old.Removed().Load() != 1 {
		t.Fatal("past SoftHold the sweep kept what the soft ban still matched")
	}
	if p := s.Pending(); len(p) != 1 || p[0] != young {
		t.Fatalf("bans left %v, want the young soft ban", p)
	}
}
