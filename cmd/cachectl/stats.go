package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/units"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// responseRoutes are the routes a node answers a client request by, in the
// order the table shows their bytes.
var responseRoutes = []string{"local", "relayed", "bypass", "redirect"}

// clusterStats is what `cachectl stats` prints: each node's counters since
// it started, and their sum.
type clusterStats struct {
	Nodes []*trafficStats `json:"nodes"`
	Total *trafficStats   `json:"total"`
	wide  bool            // every column, not the 80 that fit a terminal
}

// trafficStats are one node's request counters, or a sum of them. The
// ratios are null when there were no requests.
type trafficStats struct {
	Node string `json:"node"`
	// Live says the figures were read from the node now; otherwise they
	// are its last load report, and Unreachable says why.
	Live           bool   `json:"live"`
	Unreachable    string `json:"unreachable,omitempty"`
	Requests       uint64 `json:"requests"`
	Hits           uint64 `json:"hits"`
	OriginRequests uint64 `json:"origin_requests"`
	Relayed        uint64 `json:"relayed"`
	// PeerAnswers are the requests the node answered for peers that
	// relayed them to it, as their key's owner.
	PeerAnswers uint64 `json:"peer_answers"`
	PeerBytes   uint64 `json:"peer_bytes"`
	// ResponseBytes are the body bytes sent to clients by route.
	ResponseBytes map[string]uint64 `json:"response_bytes_by_route"`
	// HitRatio is hits over requests.
	HitRatio *float64 `json:"hit_ratio"`
	// OriginOffload is the share of requests that did not reach the
	// origin: of a node's, those it answered itself (originBase).
	OriginOffload *float64 `json:"origin_offload"`
	// RelayFraction is the share of requests relayed to another node.
	RelayFraction *float64 `json:"relay_fraction"`
	// LocalOnlyOriginRequests estimates the origin requests the same
	// traffic would have caused with a cache of each node's size keeping
	// only what its own clients asked for (no sharding); ShardingSaves is
	// the share of those the cluster did not make (negative: sharding
	// cost origin requests), a node's at its rate of origin requests per
	// request it answered.
	LocalOnlyOriginRequests float64  `json:"local_only_origin_requests"`
	ShardingSaves           *float64 `json:"sharding_saves"`
}

func newStatsCommand(g *globalOptions) *cobra.Command {
	return showCommand(g, "stats", "Show each node's hit ratio, origin offload, relay fraction and response bytes since it started",
		func(ctx context.Context, c *admin.Client) (*clusterStats, error) {
			resp, err := g.listNodes(ctx, c)
			if err != nil {
				return nil, err
			}
			s := statsOf(resp, readLive(ctx, c, resp.GetNodes()))
			s.wide = g.output == "wide"
			return s, nil
		}, statsTable)
}

// statsOf sums the nodes' live counters, or their last load reports when
// live has none for them.
func statsOf(resp *pb.ListNodesResponse, live liveStats) *clusterStats {
	s := &clusterStats{Nodes: []*trafficStats{}, Total: newTrafficStats("total")}
	s.Total.Live = true
	for _, n := range resp.GetNodes() {
		l := n.GetLoad()
		ns := newTrafficStats(n.GetMember().GetId())
		if st, ok := live.stats[ns.Node]; ok {
			l, ns.Live = st.Load, true
		} else if err, ok := live.errs[ns.Node]; ok {
			ns.Unreachable = err.Error()
		} else {
			ns.Unreachable = "not asked"
		}
		s.Total.Live = s.Total.Live && ns.Live
		ns.Requests, ns.Hits, ns.OriginRequests = l.GetRequestsTotal(), l.GetHitsTotal(), l.GetOriginRequestsTotal()
		ns.Relayed, ns.PeerAnswers, ns.PeerBytes = l.GetRelayedTotal(), l.GetPeerAnswersTotal(), l.GetPeerBytesTotal()
		ns.LocalOnlyOriginRequests = l.GetLocalEstimateRequests() - l.GetLocalEstimateHits()
		s.Total.LocalOnlyOriginRequests += ns.LocalOnlyOriginRequests
		for r, b := range l.GetResponseBytesByRoute() {
			ns.ResponseBytes[r] = b
			s.Total.ResponseBytes[r] += b
		}
		s.Total.Requests += ns.Requests
		s.Total.Hits += ns.Hits
		s.Total.OriginRequests += ns.OriginRequests
		s.Total.Relayed += ns.Relayed
		s.Total.PeerAnswers += ns.PeerAnswers
		s.Total.PeerBytes += ns.PeerBytes
		s.Nodes = append(s.Nodes, ns)
	}
	byAnswers := answersReported(float64(s.Total.Relayed), float64(s.Total.PeerAnswers))
	for _, ns := range s.Nodes {
		base := float64(ns.Requests)
		if byAnswers {
			base = originBase(float64(ns.Requests), float64(ns.Relayed), float64(ns.PeerAnswers))
		}
		ns.ratios(base)
	}
	s.Total.ratios(float64(s.Total.Requests))
	return s
}

// newTrafficStats returns zero counters, with every route's bytes present
// so that scripts find them.
func newTrafficStats(node string) *trafficStats {
	t := &trafficStats{Node: node, ResponseBytes: make(map[string]uint64, len(responseRoutes))}
	for _, r := range responseRoutes {
		t.ResponseBytes[r] = 0
	}
	return t
}

// ratios fills the ratios from the counters, the origin's against base
// requests (originBase).
func (t *trafficStats) ratios(base float64) {
	if base > 0 { // a node that answered only its peers has one too
		offload := 1 - float64(t.OriginRequests)/base
		t.OriginOffload = &offload
	}
	if t.Requests == 0 {
		return
	}
	share := func(n uint64) *float64 {
		v := float64(n) / float64(t.Requests)
		return &v
	}
	t.HitRatio, t.RelayFraction = share(t.Hits), share(t.Relayed)
	if base > 0 && t.LocalOnlyOriginRequests > 0 {
		perRequest := float64(t.OriginRequests) / base
		saves := 1 - perRequest/(t.LocalOnlyOriginRequests/float64(t.Requests))
		t.ShardingSaves = &saves
	}
}

// originBase is what a node's origin requests are counted against: the
// requests it answered itself, those of its clients it did not relay and
// those its peers relayed to it. A node's origin requests are its fills
// as the owner of keys that any node's clients asked for, so against its
// own clients' requests they could pass 100 % (a node few clients use,
// owning keys others' clients ask for). Summed over the cluster it is
// the client requests, which the total is counted against.
func originBase(requests, relayed, peerAnswers float64) float64 {
	return requests - relayed + peerAnswers
}

// answersReported reports whether the nodes count the requests they
// answer for peers, from the cluster's relayed requests and answers for
// peers: every request a node relays is an answer at a peer, so relayed
// requests and none answered are nodes older than peer_answers_total,
// which report 0. Their origin requests are counted against their client
// requests then, as before: against those they did not relay, a node
// relaying two in three would show three times its origin share.
func answersReported(relayed, peerAnswers float64) bool {
	return peerAnswers > 0 || relayed == 0
}

// statsTable fits 80 columns; -o wide adds the local-only estimate and
// the bytes by route. A node whose figures are its last report, not live,
// is marked with a "*" and named below.
func statsTable(tw *tabwriter.Writer, s *clusterStats) {
	fmt.Fprint(tw, "NODE\tREQUESTS\tHIT\tOFFLOAD\tRELAYED\tORIGIN\tSAVES\tPEER BYTES")
	if s.wide {
		fmt.Fprint(tw, "\tLOCAL-ONLY EST")
		for _, r := range responseRoutes {
			fmt.Fprintf(tw, "\t%s BYTES", strings.ToUpper(r))
		}
	}
	fmt.Fprintln(tw)
	var stale []string
	for _, t := range slices.Concat(s.Nodes, []*trafficStats{s.Total}) {
		name := shown(t.Node)
		if !t.Live {
			name += "*"
			if t.Unreachable != "" {
				stale = append(stale, shown(t.Node)+": "+shown(t.Unreachable))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s", name, t.Requests, percent(t.HitRatio), percent(t.OriginOffload),
			percent(t.RelayFraction), t.OriginRequests, percent(t.ShardingSaves), units.Bytes(int64(t.PeerBytes)))
		if s.wide {
			fmt.Fprintf(tw, "\t%.0f", t.LocalOnlyOriginRequests)
			for _, r := range responseRoutes {
				fmt.Fprintf(tw, "\t%s", units.Bytes(int64(t.ResponseBytes[r])))
			}
		}
		fmt.Fprintln(tw)
	}
	if len(stale) > 0 {
		fmt.Fprintln(tw, "* last load report, not live:")
		for _, why := range stale {
			fmt.Fprintln(tw, "  "+why)
		}
	}
}

// percent is 0.9712 as "97.1%", and nil as "-".
func percent(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}
