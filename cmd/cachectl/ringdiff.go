package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/shardcache/shardcache/cmd/internal/command"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/ring"
)

// diffSampleKeys is how many keys ring diff maps through both epochs.
const diffSampleKeys = 100_000

// ringDiff is what changed between two epochs.
type ringDiff struct {
	From       uint64   `json:"from"`
	To         uint64   `json:"to"`
	Added      []string `json:"added"`
	Removed    []string `json:"removed"`
	Changed    []string `json:"changed"`
	Sampled    int      `json:"sampled_keys"`
	Moved      int      `json:"moved_keys"`
	MovedShare float64  `json:"moved_share"`
}

func newRingDiffCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "diff A B",
		Short: "Show the members that changed between epochs A and B and the share of keys that move",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var nums [2]uint64
			for i, a := range args {
				n, err := strconv.ParseUint(a, 10, 64)
				if err != nil || n == 0 {
					return command.Usage(fmt.Errorf("epoch %q: want a positive epoch number", a))
				}
				nums[i] = n
			}
			return g.withClient(func(c *admin.Client) error {
				cur, err := c.GetRing(cmd.Context(), 0)
				if err != nil {
					return err
				}
				var epochs [2]*pb.RingEpoch
				for i, n := range nums {
					if n > cur.GetEpoch() {
						return command.WithCode(command.ExitNotFound, fmt.Errorf("there is no epoch %d yet: the current epoch is %d", n, cur.GetEpoch()))
					}
					e, err := c.GetRing(cmd.Context(), n)
					if errors.Is(err, admin.ErrNotFound) {
						return command.WithCode(command.ExitNotFound, fmt.Errorf("epoch %d is no longer kept (the current epoch is %d)", n, cur.GetEpoch()))
					}
					if err != nil {
						return err
					}
					epochs[i] = e
				}
				a, b := epochs[0], epochs[1]
				d, err := diffEpochs(a, b, diffSampleKeys)
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), g.output, d, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "epoch %d -> %d\n", d.From, d.To)
					fmt.Fprintf(tw, "added\t%s\n", dash(strings.Join(d.Added, " ")))
					fmt.Fprintf(tw, "removed\t%s\n", dash(strings.Join(d.Removed, " ")))
					fmt.Fprintf(tw, "changed\t%s\n", dash(strings.Join(d.Changed, " ")))
					fmt.Fprintf(tw, "keys moving\t%.2f%% (%d of %d sampled)\n", 100*d.MovedShare, d.Moved, d.Sampled)
				})
			})
		},
	}
}

// diffEpochs compares the members of two epochs and samples how many keys
// change owner, with the same hash the nodes use.
func diffEpochs(a, b *pb.RingEpoch, samples int) (*ringDiff, error) {
	d := &ringDiff{From: a.GetEpoch(), To: b.GetEpoch(), Sampled: samples}
	before := map[string]*pb.Member{}
	for _, m := range a.GetMembers() {
		before[m.GetId()] = m
	}
	for _, m := range b.GetMembers() {
		old, ok := before[m.GetId()]
		switch {
		case !ok:
			d.Added = append(d.Added, m.GetId())
		case !proto.Equal(old, m):
			d.Changed = append(d.Changed, m.GetId())
		}
		delete(before, m.GetId())
	}
	for _, m := range a.GetMembers() {
		if _, gone := before[m.GetId()]; gone {
			d.Removed = append(d.Removed, m.GetId())
		}
	}
	ra, err := ringOf(a)
	if err != nil {
		return nil, err
	}
	rb, err := ringOf(b)
	if err != nil {
		return nil, err
	}
	for i := range samples {
		key := "k" + strconv.Itoa(i)
		if ra.Owner(key).ID != rb.Owner(key).ID {
			d.Moved++
		}
	}
	if samples > 0 {
		d.MovedShare = float64(d.Moved) / float64(samples)
	}
	return d, nil
}

func ringOf(e *pb.RingEpoch) (*ring.Ring, error) {
	members := make([]ring.Member, 0, len(e.GetMembers()))
	for _, m := range e.GetMembers() {
		members = append(members, ring.Member{ID: m.GetId(), Weight: m.GetWeight()})
	}
	if len(members) == 0 {
		return nil, nil // an empty epoch: every key has no owner
	}
	r, err := ring.New(e.GetEpoch(), members)
	if err != nil {
		return nil, fmt.Errorf("epoch %d: %w", e.GetEpoch(), err)
	}
	return r, nil
}
