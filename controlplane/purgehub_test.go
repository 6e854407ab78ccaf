package controlplane

import (
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// hubEvents are the watch events of the leader's compaction deleting
// purges ids (in one transaction), or, with put, of recording them.
func hubEvents(s *state, put bool, ids []string, rev int64) []*clientv3.Event {
	evs := make([]*clientv3.Event, len(ids))
	for i, id := range ids {
		kv := &mvccpb.KeyValue{Key: []byte(s.purgeKey(id)), ModRevision: rev + int64(i)}
		typ := clientv3.EventTypeDelete
		if put {
			kv.Value, _ = proto.Marshal(&pb.Purge{Id: id, Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://shop.example/" + id, CreatedAt: timestamppb.Now()})
			typ = clientv3.EventTypePut
		}
		evs[i] = &clientv3.Event{Type: mvccpb.Event_EventType(typ), Kv: kv}
	}
	return evs
}

// The leader deletes the oldest purges in transactions of 32 once the
// retention is reached; the hub drops them, and only them, whether they
// lead the view or not.
func TestPurgeHubDropsDeletedPurges(t *testing.T) {
	s := &state{prefix: "/t/"}
	h := newPurgeHub()
	h.load(nil, nil)
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("p%d", i))
	}
	h.apply(s, hubEvents(s, true, ids, 10))
	h.apply(s, hubEvents(s, false, ids[:32], 200))                       // the oldest, as compaction deletes them
	h.apply(s, hubEvents(s, false, []string{"p50", "p99", "gone"}, 300)) // out of order, and one unknown
	got, _, err := h.since(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string{}, ids[32:50]...), ids[51:99]...)
	if len(got) != len(want) || len(h.purges) != len(want) {
		t.Fatalf("%d purges and %d items left, want %d", len(got), len(h.purges), len(want))
	}
	for i, p := range got {
		if p.GetId() != want[i] || p.GetRevision() != int64(10+32+i+boolInt(i >= 18)) {
			t.Fatalf("purge %d: %s at %d, want %s", i, p.GetId(), p.GetRevision(), want[i])
		}
		var item pb.PurgeBatch
		if err := proto.Unmarshal(h.purges[i].item, &item); err != nil || len(item.GetPurges()) != 1 || item.GetPurges()[0].GetId() != want[i] {
			t.Fatalf("item %d does not carry %s: %v %v", i, want[i], err, item.GetPurges())
		}
	}
	if h.head() != 10+98 {
		t.Fatalf("head %d, want %d", h.head(), 10+98)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkPurgeHubCompaction is one transaction of the leader's
// compaction (32 of the oldest purges deleted) as a replica's hub applies
// it with the default 100,000 purges retained: what every replica pays
// 31 times a second under a sustained 1,000 purges a second once the
// retention is reached.
func BenchmarkPurgeHubCompaction(b *testing.B) {
	s := &state{prefix: "/t/"}
	h := newPurgeHub()
	h.load(nil, nil)
	const kept = 100_000
	next := 0
	add := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("p%d", next)
			next++
		}
		h.apply(s, hubEvents(s, true, ids, int64(next)))
		return ids
	}
	var oldest []string
	for range kept / 1000 {
		oldest = append(oldest, add(1000)...)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		oldest = append(oldest, add(32)...)
		del := hubEvents(s, false, oldest[:32], 0)
		oldest = oldest[32:]
		b.StartTimer()
		h.apply(s, del)
	}
	if all, _ := h.retained(); all != kept {
		b.Fatalf("%d purges kept, want %d", all, kept)
	}
}

// A view keeps whole only the newest purges of its window, and of the
// others what compaction needs; a deletion among either drops it.
func TestPurgeHubKeepsTheNewestWhole(t *testing.T) {
	s := &state{prefix: "/t/"}
	h := newPurgeHub()
	h.window = 3
	h.load(nil, nil)
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("p%d", i))
	}
	h.apply(s, hubEvents(s, true, ids, 10)) // revisions 10..17
	if all, whole := h.retained(); all != 8 || whole != 3 || len(h.purges) != 3 {
		t.Fatalf("%d retained, %d whole, %d items: want 8, 3, 3", all, whole, len(h.purges))
	}
	if h.head() != 17 || h.purges[0].p.GetId() != "p5" {
		t.Fatalf("head %d, oldest whole %s: want 17 and p5", h.head(), h.purges[0].p.GetId())
	}
	if got := h.expired(5, time.Time{}); len(got) != 3 || got[0].id != "p0" || got[2].rev != 12 || got[2].created == 0 {
		t.Fatalf("expired past 5: %+v, want p0..p2 with their revisions and times", got)
	}
	h.mu.Lock()
	behind, within := h.wholeAfterLocked(13), h.wholeAfterLocked(14)
	h.mu.Unlock()
	if behind || !within {
		t.Fatalf("whole after 13: %v, after 14: %v; want false, true", behind, within)
	}
	h.apply(s, hubEvents(s, false, []string{"p0", "p1", "p6"}, 100)) // two only referenced, one whole
	if all, whole := h.retained(); all != 5 || whole != 2 || h.purges[0].p.GetId() != "p5" || h.purges[1].p.GetId() != "p7" {
		t.Fatalf("after deleting p0, p1 and p6: %d retained, %d whole (%v)", all, whole, h.purges)
	}
	var item pb.PurgeBatch
	if err := proto.Unmarshal(h.purges[1].item, &item); err != nil || item.GetPurges()[0].GetId() != "p7" {
		t.Fatalf("the items no longer follow the purges: %v %v", item.GetPurges(), err)
	}
}
