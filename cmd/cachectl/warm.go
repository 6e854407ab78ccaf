package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/units"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newWarmCommand(g *globalOptions) *cobra.Command {
	var platform, nodeID string
	cmd := &cobra.Command{
		Use:   "warm IMAGE...",
		Short: "Preheat container images into the mirror: every blob filled at its owner",
		Long: `Preheat container images into the cluster's mirror policy (a policy with registries)
before a rollout: each reference ([host/]name[:tag|@digest]; no host: the mirror's default
registry) is resolved, an index to the manifests of --platform, each manifest to its config
and layers, and every manifest and blob is filled by its owner from its upstream registry, so
the pulls that follow fetch nothing upstream. Warming what is cached already fetches nothing:
it is reported cached. The control plane's Warm RPC has one node do the work (--node, default
the first active node), at that node's ops listener with a warm grant the control plane signs, and
streams its progress back; progress goes to stderr, the summary to stdout. The exit status is
non-zero when a manifest or blob failed, or when the node could not be reached or refused.
--timeout does not bound a warm: it lasts as long as its transfers (Ctrl-C stops it).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *admin.Client) error {
				bar := newWarmBar(cmd.ErrOrStderr())
				sum, err := c.Warm(cmd.Context(), &pb.WarmRequest{Images: args, Platform: platform, Node: nodeID}, bar.step)
				bar.end()
				if err != nil {
					return err
				}
				if err := render(cmd.OutOrStdout(), g.output, sum, func(tw *tabwriter.Writer) { warmTable(tw, sum) }); err != nil {
					return err
				}
				if sum.GetFailed() > 0 {
					return fmt.Errorf("%d of %d manifests and blobs failed (above)", sum.GetFailed(), sum.GetFailed()+sum.GetFilled()+sum.GetCached())
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&platform, "platform", "", "the platform of an index's manifests to warm: os/arch[/variant], or all (default linux/amd64)")
	cmd.Flags().StringVar(&nodeID, "node", "", "the node that does the work (default: the first active node)")
	return cmd
}

// warmBar shows a warm's progress: a bar redrawn in place on a terminal,
// a line a step elsewhere (a log keeps every step).
type warmBar struct {
	w    io.Writer
	tty  bool
	drew bool
}

func newWarmBar(w io.Writer) *warmBar {
	b := &warmBar{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.tty = true
		}
	}
	return b
}

func (b *warmBar) step(p *pb.WarmProgress) {
	line := fmt.Sprintf("%s %s %s %s", p.GetImage(), p.GetKind(), short(p.GetDigest(), 19), p.GetResult())
	if p.GetKind() == "blob" && p.GetTotal() > 0 {
		const width = 20
		filled := int(p.GetDone()) * width / int(p.GetTotal())
		line = fmt.Sprintf("[%s%s] %d/%d %s %s %s %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			p.GetDone(), p.GetTotal(), p.GetImage(), short(p.GetDigest(), 19), units.Bytes(p.GetBytes()), p.GetResult())
	}
	if p.GetError() != "" {
		line += ": " + p.GetError()
	}
	if b.tty && p.GetResult() != "failed" {
		fmt.Fprintf(b.w, "\r\033[K%s", line)
		b.drew = true
		return
	}
	if b.drew {
		fmt.Fprint(b.w, "\r\033[K")
		b.drew = false
	}
	fmt.Fprintln(b.w, line)
}

func (b *warmBar) end() {
	if b.drew {
		fmt.Fprintln(b.w)
	}
}

func warmTable(tw *tabwriter.Writer, s *pb.WarmSummary) {
	fmt.Fprintln(tw, "IMAGES\tMANIFESTS\tBLOBS\tBYTES\tFILLED\tCACHED\tFAILED\tNODE")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n", s.GetImages(), s.GetManifests(), s.GetBlobs(), units.Bytes(s.GetBytes()),
		s.GetFilled(), s.GetCached(), s.GetFailed(), s.GetNode())
}
