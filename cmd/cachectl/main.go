// Command cachectl manages a shardcache cluster through the control plane's
// admin API.
package main

import (
	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
)

func main() { command.Main("cachectl", newRootCommand()) }

func newRootCommand() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "cachectl",
		Short: "Manage a shardcache cluster",
	}
	g.register(root)
	root.AddCommand(newRingCommand(g), newNodesCommand(g), newBenchCommand(g), newPolicyCommand(g),
		newDrainCommand(g), newUndrainCommand(g), newPurgeCommand(g), newLocateCommand(g), newStatsCommand(g),
		newInspectCommand(g), newTopCommand(g), newLogCommand(g), newVersionCommand(g))
	return root
}
