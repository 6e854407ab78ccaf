package main

import (
	"errors"
	"math"
	"strings"
	"testing"
	"text/tabwriter"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func testLoads() *pb.ListNodesResponse {
	return &pb.ListNodesResponse{Epoch: 7, Nodes: []*pb.Node{
		{Member: &pb.Member{Id: "node-1"}, Load: &pb.LoadReport{RequestsTotal: 1000, HitsTotal: 900, OriginRequestsTotal: 80,
			RelayedTotal: 600, PeerAnswersTotal: 1900, PeerBytesTotal: 3 << 20, LocalEstimateRequests: 1000, LocalEstimateHits: 750,
			ResponseBytesByRoute: map[string]uint64{"local": 5 << 20, "relayed": 12 << 20, "bypass": 2048}}},
		{Member: &pb.Member{Id: "node-2"}, Load: &pb.LoadReport{RequestsTotal: 3000, HitsTotal: 2940, OriginRequestsTotal: 45,
			RelayedTotal: 2000, PeerAnswersTotal: 700, PeerBytesTotal: 1 << 30, LocalEstimateRequests: 3000, LocalEstimateHits: 2750,
			ResponseBytesByRoute: map[string]uint64{"local": 1 << 30, "relayed": 512 << 20, "redirect": 300}}},
		{Member: &pb.Member{Id: "node-3"}}, // no report yet
	}}
}

func testLive() liveStats {
	r := testLoads()
	return liveStats{stats: map[string]*admin.NodeStats{"node-1": {Load: r.Nodes[0].Load}, "node-2": {Load: r.Nodes[1].Load}},
		errs: map[string]error{"node-3": errors.New("node-3 unreachable at http://127.0.0.1:9193: connection refused")}}
}

func TestStatsOutput(t *testing.T) {
	goldenFormats(t, "stats", statsOf(testLoads(), testLive()), statsTable)
	wide := statsOf(testLoads(), testLive())
	wide.wide = true
	goldenFormats(t, "stats-wide", wide, statsTable)
}

// The default table fits an 80-column terminal.
func TestStatsTableFitsEightyColumns(t *testing.T) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	statsTable(tw, statsOf(testLoads(), testLive()))
	tw.Flush()
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "  ") && len(line) > 80 {
			t.Errorf("a %d-column line: %q", len(line), line)
		}
	}
}

func TestStatsRatios(t *testing.T) {
	s := statsOf(testLoads(), testLive())
	tot := s.Total
	if tot.Requests != 4000 || tot.Hits != 3840 || tot.ResponseBytes["relayed"] != 524<<20 {
		t.Fatalf("total %+v", tot)
	}
	for name, got := range map[string]*float64{"hit ratio": tot.HitRatio, "origin offload": tot.OriginOffload, "relay fraction": tot.RelayFraction} {
		want := map[string]float64{"hit ratio": 0.96, "origin offload": 1 - 125.0/4000, "relay fraction": 0.65}[name]
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Local-only caches would have sent 250+250 requests to the origin; the
	// cluster sent 125: sharding saved 75 %.
	if tot.LocalOnlyOriginRequests != 500 || tot.ShardingSaves == nil || *tot.ShardingSaves != 0.75 {
		t.Errorf("local-only estimate %v, sharding saves %v; want 500 and 0.75", tot.LocalOnlyOriginRequests, tot.ShardingSaves)
	}
	if n := s.Nodes[2]; n.HitRatio != nil || n.OriginOffload != nil || n.RelayFraction != nil {
		t.Errorf("a node without requests has ratios: %+v", n)
	}
	// A node's origin requests are counted against what it answered
	// itself: 1000 − 600 relayed + 1900 answered for peers.
	if n := s.Nodes[0]; n.OriginOffload == nil || *n.OriginOffload != 1-80.0/2300 {
		t.Errorf("node-1's offload %v, want %v", n.OriginOffload, 1-80.0/2300)
	}
}

// A node few clients use, owning keys its peers' clients ask for, makes
// more origin requests than its own clients sent: its offload is still a
// share of what it answered, never below zero, and so is what sharding
// saves at its rate.
func TestStatsOfANodeThatAnswersMostlyForPeers(t *testing.T) {
	resp := &pb.ListNodesResponse{Nodes: []*pb.Node{{Member: &pb.Member{Id: "owner"}, Load: &pb.LoadReport{
		RequestsTotal: 4, RelayedTotal: 3, PeerAnswersTotal: 20, OriginRequestsTotal: 6,
		LocalEstimateRequests: 4, LocalEstimateHits: 2}}}}
	n := statsOf(resp, liveStats{}).Nodes[0]
	if want := 1 - 6.0/21; n.OriginOffload == nil || *n.OriginOffload != want {
		t.Errorf("offload %v, want %v (6 origin requests of 21 answered)", n.OriginOffload, want)
	}
	// 6 of 21 answered went to the origin; a local-only cache would have
	// sent 2 of its 4.
	if want := 1 - (6.0/21)/(2.0/4); n.ShardingSaves == nil || math.Abs(*n.ShardingSaves-want) > 1e-12 {
		t.Errorf("sharding saves %v, want %v", n.ShardingSaves, want)
	}
	// One no client uses has an offload all the same.
	resp.Nodes[0].Load = &pb.LoadReport{PeerAnswersTotal: 5, OriginRequestsTotal: 1}
	n = statsOf(resp, liveStats{}).Nodes[0]
	if n.OriginOffload == nil || *n.OriginOffload != 0.8 || n.HitRatio != nil {
		t.Errorf("a node answering 5 requests for peers, 1 from the origin: offload %v, hit ratio %v; want 0.8 and none", n.OriginOffload, n.HitRatio)
	}
}

// Nodes older than peer_answers_total report none. When no node reports
// any while nodes relayed, a node's offload and sharding saves are counted
// against its client requests, as before: counted against those it did
// not relay, a node relaying 60 % of them (node-1: 80 origin requests)
// would show 80 % for its 92 %.
func TestStatsOfNodesThatReportNoPeerAnswers(t *testing.T) {
	resp := testLoads()
	for _, n := range resp.Nodes {
		if l := n.GetLoad(); l != nil {
			l.PeerAnswersTotal = 0
		}
	}
	s := statsOf(resp, liveStats{})
	if n := s.Nodes[0]; n.OriginOffload == nil || math.Abs(*n.OriginOffload-0.92) > 1e-12 {
		t.Errorf("node-1's offload %v, want 0.92 (80 origin requests of its 1000)", deref(n.OriginOffload))
	}
	if n := s.Nodes[0]; n.ShardingSaves == nil || math.Abs(*n.ShardingSaves-0.68) > 1e-12 {
		t.Errorf("node-1's sharding saves %v, want 0.68 (80 origin requests against 250 local-only)", deref(n.ShardingSaves))
	}
}

// deref is what p points to, for a message; nil when p is.
func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
