package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// TestAuthorizeEveryRequest: under authorize_every_request a blob an
// authorised client fetched is stored once, though its response is not
// public, and each later use is checked with the origin with the client's
// own credentials: a valid token gets the stored body after one
// conditional request; a wrong token, or none, gets the origin's 401 and
// no byte of the blob; a check that times out is a 504, and nothing stored
// is served. Through the owner and through a relay.
func TestAuthorizeEveryRequest(t *testing.T) {
	blob := strings.Repeat("layer-bytes ", 1000)
	var full, checks atomic.Int64
	var slow atomic.Bool
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			time.Sleep(time.Second) // past the policy's origin timeout
		}
		if tok := r.Header.Get("Authorization"); tok != "Bearer good" && tok != "Bearer other-good" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600") // not public: RFC 9111 3.5 alone would not store it
		w.Header().Set("ETag", `"sha256:1"`)
		if r.Header.Get("If-None-Match") == `"sha256:1"` {
			checks.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		w.Write([]byte(blob))
	}))
	defer origin.Close()
	a, b, e := startPair(t, origin.URL)
	set := &pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "registry", PathPrefix: "/v2/", AuthorizeEveryRequest: true, OriginTimeout: durationpb.New(300 * time.Millisecond)},
	}}
	for _, n := range []*Node{a, b} {
		if err := n.ApplyPolicies(set); err != nil {
			t.Fatal(err)
		}
	}
	for _, via := range []*Node{b, a} { // b owns the path; a relays to it
		full.Store(0)
		checks.Store(0)
		slow.Store(false)
		path := pathOwnedBy(t, e, "/v2/app/blobs/"+via.ID()+"/", "b")
		url := "http://" + via.ClientAddr().String() + path
		get := func(token string) (*http.Response, string) {
			t.Helper()
			if token == "" {
				return do(t, "GET", url)
			}
			return do(t, "GET", url, "Authorization", "Bearer "+token)
		}
		if resp, body := get("good"); resp.StatusCode != 200 || body != blob || full.Load() != 1 {
			t.Fatalf("via %s, first authorised GET: %d, %d bytes, %d full fetches", via.ID(), resp.StatusCode, len(body), full.Load())
		}
		for i, tok := range []string{"good", "other-good"} {
			resp, body := get(tok)
			if resp.StatusCode != 200 || body != blob || resp.Header.Get("X-Cache") != "REVALIDATED" || full.Load() != 1 || checks.Load() != int64(i+1) {
				t.Fatalf("via %s, token %s: %d %s, %d bytes, %d full fetches, %d checks; want the stored blob after one check",
					via.ID(), tok, resp.StatusCode, resp.Header.Get("X-Cache"), len(body), full.Load(), checks.Load())
			}
		}
		for _, tok := range []string{"wrong", ""} {
			resp, body := get(tok)
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "layer-bytes") || resp.Header.Get("Www-Authenticate") == "" {
				t.Fatalf("via %s, token %q: %d %q; want the origin's 401 and no byte of the blob", via.ID(), tok, resp.StatusCode, body)
			}
		}
		slow.Store(true)
		if resp, body := get("good"); resp.StatusCode != http.StatusGatewayTimeout || strings.Contains(body, "layer-bytes") {
			t.Fatalf("via %s, a check that times out: %d %q; want 504 and nothing stored", via.ID(), resp.StatusCode, body)
		}
		if resp, body := do(t, "GET", url, "Authorization", "Bearer good", "Cache-Control", "only-if-cached"); resp.StatusCode != http.StatusGatewayTimeout || strings.Contains(body, "layer-bytes") {
			t.Fatalf("via %s, only-if-cached: %d; want 504, never the stored blob unchecked", via.ID(), resp.StatusCode)
		}
	}
}
