package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/units"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newNodesCommand(g *globalOptions) *cobra.Command {
	return showCommand(g, "nodes", "List the registered nodes with their version and load",
		func(ctx context.Context, c *admin.Client) (*pb.ListNodesResponse, error) { return c.ListNodes(ctx) },
		func(tw *tabwriter.Writer, resp *pb.ListNodesResponse) {
			nodesTable(tw, resp, time.Now(), g.output == "wide")
		})
}

// showCommand is a command without arguments that renders what get
// returns, with table for -o table.
func showCommand[T any](g *globalOptions, use, short string, get func(context.Context, *admin.Client) (T, error), table func(*tabwriter.Writer, T)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(func(c *admin.Client) error {
				v, err := get(cmd.Context(), c)
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), g.output, v, func(tw *tabwriter.Writer) { table(tw, v) })
			})
		},
	}
}

// nodesTable fits 80 columns; wide adds the session replica and the
// raw counters.
func nodesTable(tw *tabwriter.Writer, resp *pb.ListNodesResponse, now time.Time, wide bool) {
	fmt.Fprint(tw, "ID\tSTATE\tRING\tEPOCH\tVERSION\tMEMORY\tHIT\tREPORT")
	if wide {
		fmt.Fprint(tw, "\tREPLICA\tOBJECTS\tREQUESTS\tHITS")
	}
	fmt.Fprintln(tw)
	for _, n := range resp.GetNodes() {
		l := n.GetLoad()
		last := "-"
		if n.GetLastReportAt() != nil {
			last = now.Sub(n.GetLastReportAt().AsTime()).Round(time.Second).String() + " ago"
		}
		ring := "out"
		if n.GetInRing() {
			ring = "in"
		}
		var hit *float64
		if l.GetRequestsTotal() > 0 {
			r := float64(l.GetHitsTotal()) / float64(l.GetRequestsTotal())
			hit = &r
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", n.GetMember().GetId(), stateName(n.GetMember().GetState()),
			ring, n.GetServingEpoch(), short(dash(n.GetMember().GetVersion()), 14), units.Bytes(l.GetMemoryBytes()), percent(hit), last)
		if wide {
			fmt.Fprintf(tw, "\t%s\t%d\t%d\t%d", dash(n.GetSessionReplica()), l.GetMemoryObjects(), l.GetRequestsTotal(), l.GetHitsTotal())
		}
		fmt.Fprintln(tw)
	}
	// Refused hellos after the table: a second process with a live
	// node's id is an operator's mistake to see at once.
	for _, n := range resp.GetNodes() {
		if m := n.GetMember(); m.GetPeerHop() == "insecure" {
			fmt.Fprintf(tw, "\n%s\n", wrap(fmt.Sprintf("INSECURE %s: its peer hop at %s authenticates no one (--insecure-peer-hop): whoever reaches it can fill its cache",
				m.GetId(), m.GetPeerAddress()), 80))
		}
		if r := n.GetLastRefused(); r != nil {
			fmt.Fprintf(tw, "\n%s\n", wrap(fmt.Sprintf("REFUSED %s: a second process (peer %s, from %s) said hello %s ago on %s: %s", n.GetMember().GetId(),
				dash(r.GetPeerAddress()), dash(r.GetRemoteAddress()), now.Sub(r.GetAt().AsTime()).Round(time.Second), dash(r.GetReplica()), r.GetReason()), 80))
		}
	}
}

// short cuts s to n characters, marking the cut with "~".
func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "~"
}

// wrap breaks s into lines of at most width columns at spaces (a word
// longer than width stays whole), continuation lines indented by two.
func wrap(s string, width int) string {
	var b strings.Builder
	col := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case col+1+len(w) > width:
			b.WriteString("\n  ")
			col = 2
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}

// askNodes calls ask for every node at once; its answers and errors are
// in the nodes' order.
func askNodes[T any](nodes []*pb.Node, ask func(*pb.Node) (T, error)) ([]T, []error) {
	answers, errs := make([]T, len(nodes)), make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { answers[i], errs[i] = ask(n) })
	}
	wg.Wait()
	return answers, errs
}

// liveStats are the nodes' live figures, by node id, and why those that
// have none could not be read.
type liveStats struct {
	stats map[string]*admin.NodeStats
	errs  map[string]error
}

// readLive reads every node's live figures from its ops listener, all at
// once.
func readLive(ctx context.Context, c *admin.Client, nodes []*pb.Node) liveStats {
	answers, errs := askNodes(nodes, func(n *pb.Node) (*admin.NodeStats, error) { return c.NodeStats(ctx, n) })
	l := liveStats{stats: map[string]*admin.NodeStats{}, errs: map[string]error{}}
	for i, n := range nodes {
		if errs[i] != nil {
			l.errs[n.GetMember().GetId()] = errs[i]
		} else {
			l.stats[n.GetMember().GetId()] = answers[i]
		}
	}
	return l
}
