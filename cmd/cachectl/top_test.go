package main

import (
	"math"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/shardcache/shardcache/sdk/admin"
)

func TestTopQuantiles(t *testing.T) {
	// 100 observations: 50 up to 1 ms, 40 more up to 10 ms, 10 more up to 100 ms.
	bs := []admin.Bucket{{LE: 0.001, Count: 50}, {LE: 0.01, Count: 90}, {LE: 0.1, Count: 100}, {LE: math.Inf(1), Count: 100}}
	if p50 := quantile(bs, 0.5); p50 == nil || *p50 != 0.001 {
		t.Errorf("p50 %v, want 1ms", p50)
	}
	if p99 := quantile(bs, 0.99); p99 == nil || math.Abs(*p99-0.091) > 1e-9 {
		t.Errorf("p99 %v, want 91ms (interpolated in the 10-100 ms bucket)", p99)
	}
	if quantile([]admin.Bucket{{LE: 1, Count: 0}}, 0.5) != nil {
		t.Error("a quantile of no observations")
	}
	// A window is the difference of two readings, summed over routes.
	now := map[string][]admin.Bucket{"local": {{LE: 1, Count: 30}, {LE: math.Inf(1), Count: 40}}, "relayed": {{LE: 1, Count: 5}, {LE: math.Inf(1), Count: 5}}}
	before := map[string][]admin.Bucket{"local": {{LE: 1, Count: 10}, {LE: math.Inf(1), Count: 10}}}
	if d := bucketDelta(now, before); len(d) != 2 || d[0].Count != 25 || d[1].Count != 35 {
		t.Errorf("window buckets %v, want 25 and 35", d)
	}
}

func TestTopTableSortsAndFits(t *testing.T) {
	one, half := 1.0, 0.5
	v := &topView{Nodes: []*topNode{
		{Node: "node-1", RequestsPerS: 10, HitRatio: &half},
		{Node: "node-2", RequestsPerS: 30, HitRatio: &one},
		{Node: "node-3", Unreachable: "node-3 unreachable at http://10.0.0.3:9191: connection refused"},
	}, Total: &topNode{Node: "total", RequestsPerS: 40}}
	order := func(by rune, desc bool) string {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		topTable(tw, v, by, desc)
		tw.Flush()
		var names []string
		for _, l := range strings.Split(b.String(), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "node-") {
				names = append(names, f[0])
			}
			if len(l) > 80 {
				t.Errorf("a %d-column line: %q", len(l), l)
			}
		}
		return strings.Join(names, " ")
	}
	if got := order('r', true); got != "node-2 node-1 node-3" {
		t.Errorf("by requests: %s", got)
	}
	if got := order('n', false); got != "node-1 node-2 node-3" {
		t.Errorf("by name: %s", got)
	}
	if got := order('h', false); got != "node-3 node-1 node-2" {
		t.Errorf("by hit ratio, ascending: %s", got)
	}
}

// A node's offload in the window is a share of the requests it answered
// itself (its clients' less those it relayed, and its peers'), never below
// zero for a node that answers mostly for peers; the total's is a share of
// the client requests.
func TestTopOffloadCountsWhatANodeAnswered(t *testing.T) {
	tn := &topNode{requests: 4, relayed: 3, origin: 6, base: originBase(4, 3, 20)}
	tn.rates(1)
	if want := 1 - 6.0/21; tn.OriginOffload == nil || *tn.OriginOffload != want {
		t.Errorf("offload %v, want %v", tn.OriginOffload, want)
	}
	idle := &topNode{}
	if idle.rates(1); idle.OriginOffload != nil {
		t.Errorf("a node that answered nothing has an offload: %v", *idle.OriginOffload)
	}
}

// In a window where no node reports answers for peers while nodes
// relayed (nodes older than peer_answers_total), a node's offload is
// counted against its client requests, as before.
func TestTopOffloadOfNodesThatReportNoPeerAnswers(t *testing.T) {
	v := &topView{Nodes: []*topNode{
		{Node: "old", sampled: true, requests: 1000, relayed: 600, origin: 80},
		{Node: "unreachable"},
	}, Total: &topNode{Node: "total"}}
	v.rates(1)
	if n := v.Nodes[0]; n.OriginOffload == nil || math.Abs(*n.OriginOffload-0.92) > 1e-12 {
		t.Errorf("offload %v, want 0.92 (80 origin requests of 1000)", deref(n.OriginOffload))
	}
	if n := v.Nodes[1]; n.OriginOffload != nil || n.HitRatio != nil {
		t.Errorf("a node not sampled has ratios: %+v", n)
	}
	// With answers reported, what it answered itself: 1000 − 600 + 500.
	v.Nodes[0].peerAnswers = 500
	v.rates(1)
	if n := v.Nodes[0]; n.OriginOffload == nil || math.Abs(*n.OriginOffload-(1-80.0/900)) > 1e-12 {
		t.Errorf("offload %v, want %v", deref(n.OriginOffload), 1-80.0/900)
	}
}
