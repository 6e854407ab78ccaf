package purge

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// BenchmarkBanCheck is the lookup's cost of purges: no ban, an object newer
// than every ban (the common case), and an object older than 1,000 bans of
// each kind still being swept.
func BenchmarkBanCheck(b *testing.B) {
	e := &store.Entry{Key: "httpwww.example.com/a/b?c=1", URL: "www.example.com/a/b?c=1",
		Header: http.Header{"Surrogate-Key": {"home product-7 listing"}}}
	many := New()
	at := time.Now()
	for i := range 1000 {
		for _, p := range []*pb.Purge{
			{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: fmt.Sprintf("http://www.example.com/x/%d", i)},
			{Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: fmt.Sprint("tag-", i)},
			{Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: "www.example.com", PathPrefix: fmt.Sprintf("/p%d/", i)},
		} {
			bn, _ := NewBan(p, at.UnixNano())
			many.Add(bn, int64(i+1))
		}
	}
	for _, c := range []struct {
		name     string
		s        *Set
		received time.Time
	}{
		{"none", New(), at.Add(-time.Hour)},
		{"newer-than-3000-bans", many, at.Add(time.Second)},
		{"older-than-3000-bans", many, at.Add(-time.Hour)},
	} {
		e.Received = c.received
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if c.s.Match(e) != nil {
					b.Fatal("matched")
				}
			}
		})
	}
}
