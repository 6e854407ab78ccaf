package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// completionTimeout bounds the call a completion makes (less when --timeout
// is shorter), so that a shell does not hang on a control plane that is down.
const completionTimeout = 2 * time.Second

// completeNodes completes the first argument with the ids of the nodes in
// state, as the control plane lists them.
func completeNodes(g *globalOptions, state pb.MemberState) cobra.CompletionFunc {
	return completeFirst(g, func(ctx context.Context, c *admin.Client) ([]string, error) {
		resp, err := c.ListNodes(ctx)
		var ids []string
		for _, n := range resp.GetNodes() {
			if n.GetMember().GetState() == state {
				ids = append(ids, n.GetMember().GetId())
			}
		}
		return ids, err
	})
}

// completePolicies completes the first argument with the policy names.
func completePolicies(g *globalOptions) cobra.CompletionFunc {
	return completeFirst(g, func(ctx context.Context, c *admin.Client) ([]string, error) {
		resp, err := c.ListPolicies(ctx)
		var names []string
		for _, p := range resp.GetPolicies() {
			names = append(names, p.GetName())
		}
		return names, err
	})
}

// completeFirst completes a command's only argument with the names list
// returns that start with what is typed; on an error it offers nothing.
func completeFirst(g *globalOptions, list func(context.Context, *admin.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var matches []cobra.Completion
		_ = g.withClient(func(c *admin.Client) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), min(g.timeout, completionTimeout))
			defer cancel()
			names, err := list(ctx, c)
			for _, n := range names {
				if strings.HasPrefix(n, toComplete) {
					matches = append(matches, n)
				}
			}
			return err
		})
		return matches, cobra.ShellCompDirectiveNoFileComp
	}
}
