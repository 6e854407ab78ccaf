package purge

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestBanMatching(t *testing.T) {
	s := New()
	at := time.Now()
	add := func(p *pb.Purge) {
		b, err := NewBan(p, at.UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		s.Add(b, p.GetRevision())
	}
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://Shop.Example:8080/item?id=1", Revision: 1})
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Key: "custom-key", Revision: 2})
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: "img.example", PathPrefix: "/thumbs/", Revision: 3})
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_PREFIX, PathPrefix: "/news/2026", Revision: 4})
	add(&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "Product-7", Revision: 5})
	if s.Revision() != 5 {
		t.Fatalf("revision %d, want 5", s.Revision())
	}
	before := at.Add(-time.Second)
	tests := []struct {
		name string
		e    store.Entry
		want bool
	}{
		{"the URL", store.Entry{URL: "shop.example/item?id=1", Received: before}, true},
		{"another query", store.Entry{URL: "shop.example/item?id=2", Received: before}, false},
		{"the URL fetched after the purge", store.Entry{URL: "shop.example/item?id=1", Received: at.Add(time.Second)}, false},
		{"fetched after, but generated before (Age)", store.Entry{URL: "shop.example/item?id=1", Received: at.Add(time.Second), InitialAge: time.Minute}, true},
		{"the key", store.Entry{Key: "custom-key", URL: "x/y", Received: before}, true},
		{"a variant of the key", store.Entry{Key: httpcache.VariantPrefix("custom-key") + "accept-language=de", URL: "x/y", Received: before}, true},
		{"a longer key", store.Entry{Key: "custom-key-2", URL: "x/y", Received: before}, false},
		{"under the host's prefix", store.Entry{URL: "img.example/thumbs/a.png", Received: before}, true},
		{"same prefix, other host", store.Entry{URL: "cdn.example/thumbs/a.png", Received: before}, false},
		{"prefix on every host", store.Entry{URL: "any.example/news/2026/11/a", Received: before}, true},
		{"outside every prefix", store.Entry{URL: "any.example/news/2025/a", Received: before}, false},
		{"Surrogate-Key tag, other case", store.Entry{URL: "a/b", Received: before, Header: http.Header{"Surrogate-Key": {"home product-7 x"}}}, true},
		{"Cache-Tag tag", store.Entry{URL: "a/b", Received: before, Header: http.Header{"Cache-Tag": {"x, PRODUCT-7"}}}, true},
		{"other tags", store.Entry{URL: "a/b", Received: before, Header: http.Header{"Surrogate-Key": {"product-70 product"}}}, false},
		{"no URL kept (older record): any URL purge may be its", store.Entry{Key: "k", Received: before}, true},
	}
	for _, tt := range tests {
		if got := s.Match(&tt.e) != nil; got != tt.want {
			t.Errorf("%s: matched %t, want %t", tt.name, got, tt.want)
		}
	}

	// The state survives a restart, bans and their times included.
	path := filepath.Join(t.TempDir(), StateFile)
	if err := s.Save(path); err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.Load(path); err != nil {
		t.Fatal(err)
	}
	if r.Revision() != 5 || len(r.Pending()) != 5 {
		t.Fatalf("loaded revision %d with %d bans, want 5 and 5", r.Revision(), len(r.Pending()))
	}
	for _, tt := range tests {
		if got := r.Match(&tt.e) != nil; got != tt.want {
			t.Errorf("after reload, %s: matched %t, want %t", tt.name, got, tt.want)
		}
	}
	r.Drop(r.Pending())
	if r.Match(&tests[0].e) != nil || r.hard.newest.Load() != 0 {
		t.Error("dropped bans still match")
	}
}
