package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// max_variants bounds the variants a URL has stored, not the ones it ever
// stored: a variant evicted (or deleted) frees its slot, and an
// invalidation drops the URL's variants by the store's index of them.
func TestVariantBoundFollowsWhatIsStored(t *testing.T) {
	o := &testOrigin{header: http.Header{"Vary": {"X-Variant"}, "Cache-Control": {"max-age=3600"}}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{{Name: "all", PathPrefix: "/", MaxVariants: 2}}}); err != nil {
		t.Fatal(err)
	}
	const path = "/v/page"
	url := "http://" + n.ClientAddr().String() + path
	urlKey := "http127.0.0.1" + path
	get := func(variant string) string {
		t.Helper()
		resp, body := do(t, "GET", url, "X-Variant", variant)
		if resp.StatusCode != 200 || body != "body of "+path {
			t.Fatalf("variant %s: %d %q", variant, resp.StatusCode, body)
		}
		return resp.Header.Get("X-Cache")
	}
	for _, v := range []string{"a", "b"} {
		get(v)
		if got := get(v); got != "HIT" {
			t.Fatalf("variant %s again: %s, want HIT (two variants allowed)", v, got)
		}
	}
	get("c")
	if got := get("c"); got != "MISS" {
		t.Fatalf("a third variant again: %s, want MISS (max_variants 2)", got)
	}
	if got := n.store.Count(urlKey); got != 2 {
		t.Fatalf("the store counts %d variants of %s, want 2", got, urlKey)
	}
	// Variant a goes, as an eviction would take it: c may be stored now.
	for _, k := range n.store.Members(urlKey) {
		if strings.Contains(k, "=a") {
			n.store.Delete(k)
		}
	}
	get("c")
	if got := get("c"); got != "HIT" {
		t.Fatalf("the third variant after another was evicted: %s, want HIT", got)
	}
	// An unsafe method invalidates the URL (RFC 9111 4.4): every variant.
	if resp, _ := do(t, "POST", url); resp.StatusCode != 200 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	if got := n.store.Count(urlKey); got != 0 {
		t.Fatalf("%d variants left after the invalidation, want none", got)
	}
	if got := get("b"); got != "MISS" {
		t.Fatalf("variant b after the invalidation: %s, want MISS", got)
	}
}
