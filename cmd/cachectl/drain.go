package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newDrainCommand(g *globalOptions) *cobra.Command {
	var wait bool
	var quiet, timeout time.Duration
	cmd := drainCommand(g, "drain", "Take a node out of ownership in the next epoch; it keeps serving meanwhile",
		"draining: it owns no keys from the next epoch", pb.MemberState_MEMBER_STATE_ACTIVE, (*admin.Client).DrainNode)
	cmd.Long = `Take a node out of ownership in the next epoch. It keeps serving meanwhile: the new
owners of its keys take them from it by handoff as they are asked for. With --wait, wait
(printing progress) until the node owns no keys, every node routes around it, and its peers
have taken no key from it for --quiet-for; then it is safe to delete.`
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the node's keys have moved and it is safe to delete")
	cmd.Flags().DurationVar(&quiet, "quiet-for", 10*time.Second, "with --wait: how long no key may have moved before the drain counts as done")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait: how long to wait at most")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := run(cmd, args); err != nil || !wait {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		return g.withClient(func(c *admin.Client) error {
			out := cmd.OutOrStdout()
			err := c.WaitDrained(ctx, args[0], quiet, func(p admin.DrainProgress) { fmt.Fprintln(out, p) })
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "node %s owns no keys and every node routes around it: safe to delete\n", args[0])
			return nil
		})
	}
	return cmd
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
