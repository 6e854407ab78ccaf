package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/sdk/buildinfo"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi := buildinfo.Read()
			fmt.Fprintf(cmd.OutOrStdout(), "shardcache %s %s", bi.Version, bi.GoVersion)
			if bi.Revision != "" && bi.Revision != bi.Version {
				fmt.Fprintf(cmd.OutOrStdout(), " revision %s", bi.Revision)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
}
