package main

import (
	"net/url"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/ring"
)

func testPolicies() *pb.ListPoliciesResponse {
	return &pb.ListPoliciesResponse{Revision: 40, Policies: []*pb.CachePolicy{
		{Name: "api", PathPrefix: "/api/", Mode: pb.CacheMode_CACHE_MODE_BYPASS},
		{Name: "downloads", PathPrefix: "/dl/", Mode: pb.CacheMode_CACHE_MODE_LOCAL},
		{Name: "static", Hosts: []string{"www.example.com"}, PathPrefix: "/static/", KeyTemplate: "$host$uri", ReplicationFactor: 3},
		{Name: "no-preview", PathPrefix: "/", Bypass: []*pb.BypassRule{{PathPatterns: []string{"/preview/*"}}}},
	}}
}

func testLocateEpoch() *pb.RingEpoch {
	e := testEpoch()
	e.Members = append(e.Members, &pb.Member{Id: "node-2", PeerAddress: "10.0.0.2:9080", PublicUrl: "http://10.0.0.2:8080"})
	return e
}

func TestLocateOutput(t *testing.T) {
	u, _ := url.Parse("https://WWW.example.com:8443/static/app.js?v=3")
	loc, err := locate(u, testLocateEpoch(), testPolicies())
	if err != nil {
		t.Fatal(err)
	}
	goldenFormats(t, "locate", loc, locationTable)
}

func TestLocate(t *testing.T) {
	tests := []struct {
		url, key, policy string
		owners           int // 0: no owner
		bypass           bool
	}{
		{"https://www.example.com/static/app.js?v=3", "www.example.com/static/app.js", "static", 3, false},
		{"http://shop.example.com/cart?id=7", "httpshop.example.com/cart?id=7", "no-preview", 2, false},
		{"http://shop.example.com/preview/1", "httpshop.example.com/preview/1", "no-preview", 0, true},
		{"http://www.example.com/api/users", "httpwww.example.com/api/users", "api", 0, true},
		{"http://www.example.com/dl/big.iso", "httpwww.example.com/dl/big.iso", "downloads", 0, false},
	}
	e := testLocateEpoch()
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, _ := url.Parse(tt.url)
			loc, err := locate(u, e, testPolicies())
			if err != nil {
				t.Fatal(err)
			}
			if loc.Key != tt.key || loc.Policy != tt.policy || loc.Bypass != tt.bypass {
				t.Fatalf("key %q policy %s bypass %t, want %q %s %t", loc.Key, loc.Policy, loc.Bypass, tt.key, tt.policy, tt.bypass)
			}
			if tt.owners == 0 {
				if loc.Owner != nil || len(loc.HotReplicas) != 0 {
					t.Fatalf("owners %v %v, want none", loc.Owner, loc.HotReplicas)
				}
				return
			}
			r, _ := ring.New(e.GetEpoch(), []ring.Member{{ID: "node-1"}, {ID: "node-2"}, {ID: "node-3", Weight: 2}})
			want := r.Owners(tt.key, tt.owners)
			got := []string{loc.Owner.ID}
			for _, n := range loc.HotReplicas {
				got = append(got, n.ID)
			}
			if len(got) != len(want) {
				t.Fatalf("owners %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i].ID {
					t.Fatalf("owners %v, want %v", got, want)
				}
			}
		})
	}
}
