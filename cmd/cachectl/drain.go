package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newDrainCommand(g *globalOptions) *cobra.Command {
	return drainCommand(g, "drain", "Take a node out of ownership in the next epoch; it keeps serving meanwhile",
		"draining: it owns no keys from the next epoch", pb.MemberState_MEMBER_STATE_ACTIVE, (*admin.Client).DrainNode)
}

func newUndrainCommand(g *globalOptions) *cobra.Command {
	return drainCommand(g, "undrain", "Give a drained node its keys back in the next epoch",
		"undrained: it owns keys again from the next epoch", pb.MemberState_MEMBER_STATE_DRAINING, (*admin.Client).UndrainNode)
}

// drainCommand is drain or undrain; completion offers the nodes in state
// from.
func drainCommand(g *globalOptions, verb, short, done string, from pb.MemberState, call func(*admin.Client, context.Context, string) (*pb.Member, error)) *cobra.Command {
	return &cobra.Command{
		Use:               verb + " NODE",
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNodes(g, from),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *admin.Client) error {
				if _, err := call(c, cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node %s %s\n", args[0], done)
				return nil
			})
		},
	}
}
