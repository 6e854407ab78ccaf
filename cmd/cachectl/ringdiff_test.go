package main

import (
	"testing"

	"github.com/shardcache/shardcache/cmd/internal/policyfile"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func epoch(n uint64, ids ...string) *pb.RingEpoch {
	e := &pb.RingEpoch{Epoch: n}
	for _, id := range ids {
		e.Members = append(e.Members, &pb.Member{Id: id, PeerAddress: "127.0.0.1:1"})
	}
	return e
}

func TestDiffEpochs(t *testing.T) {
	a := epoch(1, "a", "b", "c")
	b := epoch(2, "a", "b", "c", "d")
	b.Members[1].Weight = 2
	d, err := diffEpochs(a, b, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Added) != 1 || d.Added[0] != "d" || len(d.Removed) != 0 || len(d.Changed) != 1 || d.Changed[0] != "b" {
		t.Fatalf("diff = %+v", d)
	}
	// d takes about 1/5 of the keys (weights 1,2,1,1) and b gains from a and c.
	if d.MovedShare < 0.25 || d.MovedShare > 0.45 {
		t.Fatalf("moved share %.3f, want about 1/5 + b's gain", d.MovedShare)
	}
	same, err := diffEpochs(a, epoch(3, "c", "b", "a"), 1000)
	if err != nil || same.Moved != 0 {
		t.Fatalf("same members in another order moved %d keys (err %v)", same.Moved, err)
	}
}

func TestParsePolicies(t *testing.T) {
	yml := []byte(`
- name: images
  hosts: [img.example.com]
  path_prefix: /img/
  mode: sharded
  default_ttl: 10m
  excluded_statuses: ["404", "500-599"]
  status_ttls:
    - {status: "200-299", ttl: 1h}
- name: api
  mode: bypass
  path_prefix: /api/
`)
	ps, err := policyfile.Parse(yml)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].GetMode() != pb.CacheMode_CACHE_MODE_SHARDED || ps[1].GetMode() != pb.CacheMode_CACHE_MODE_BYPASS {
		t.Fatalf("parsed %v", ps)
	}
	ex := ps[0].GetExcludedStatuses()
	if len(ex) != 2 || ex[0].GetFrom() != 404 || ex[0].GetTo() != 404 || ex[1].GetFrom() != 500 || ex[1].GetTo() != 599 {
		t.Fatalf("excluded statuses %v", ex)
	}
	if st := ps[0].GetStatusTtls(); len(st) != 1 || st[0].GetStatusFrom() != 200 || st[0].GetTtl().AsDuration().Hours() != 1 {
		t.Fatalf("status TTLs %v", st)
	}
	for name, bad := range map[string]string{
		"not yaml":      "{[",
		"unknown field": "name: x\nbogus: 1\n",
		"bad status":    "name: x\nexcluded_statuses: [\"4xx\"]\n",
	} {
		if _, err := policyfile.Parse([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
