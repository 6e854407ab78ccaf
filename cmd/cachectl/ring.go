package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

type ringOptions struct {
	*globalOptions
	epoch uint64
}

func newRingCommand(g *globalOptions) *cobra.Command {
	o := &ringOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "ring",
		Short: "Show the current ring epoch and its members",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.withClient(func(c *admin.Client) error {
				e, err := c.GetRing(cmd.Context(), o.epoch)
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), o.output, e, func(tw *tabwriter.Writer) { ringTable(tw, e) })
			})
		},
	}
	cmd.Flags().Uint64Var(&o.epoch, "epoch", 0, "show this past epoch instead of the current one")
	cmd.AddCommand(newRingDiffCommand(g))
	return cmd
}

func ringTable(tw *tabwriter.Writer, e *pb.RingEpoch) {
	fmt.Fprintf(tw, "EPOCH %d\tprevious %d\tcreated %s\t%s\n", e.GetEpoch(), e.GetPreviousEpoch(),
		e.GetCreatedAt().AsTime().UTC().Format("2006-01-02T15:04:05Z"), e.GetReason())
	fmt.Fprintln(tw, "ID\tPEER\tPUBLIC URL\tWEIGHT\tSTATE\tZONE")
	for _, m := range e.GetMembers() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", m.GetId(), m.GetPeerAddress(), m.GetPublicUrl(),
			max(m.GetWeight(), 1), stateName(m.GetState()), dash(m.GetZone()))
	}
}

// stateName is MEMBER_STATE_ACTIVE as "active".
func stateName(s pb.MemberState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "MEMBER_STATE_"))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
