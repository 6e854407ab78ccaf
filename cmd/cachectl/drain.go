package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newDrainCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "drain NODE",
		Short: "Take a node out of ownership in the next epoch; it keeps serving meanwhile",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.DrainNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s draining: it owns no keys from the next epoch\n", args[0])
			return nil
		},
	}
}

func newUndrainCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "undrain NODE",
		Short: "Give a drained node its keys back in the next epoch",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.UndrainNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s undrained: it owns keys again from the next epoch\n", args[0])
			return nil
		},
	}
}
