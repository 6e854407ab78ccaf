// Command cachectl manages a shardcache cluster through the control plane's
// admin API.
package main

import (
	"errors"
	"net"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/sdk/admin"
)

func main() { command.Main("cachectl", newRootCommand(), exitCode) }

func newRootCommand() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "cachectl",
		Short: "Manage a shardcache cluster",
		Long: `Manage a shardcache cluster: its ring and nodes, policies and purges through the
control plane's admin API, and each node's live figures, stored objects and access log
from its ops listener (with --nodes, without the control plane).`,
	}
	g.register(root)
	root.AddCommand(newRingCommand(g), newNodesCommand(g), newBenchCommand(g), newPolicyCommand(g),
		newDrainCommand(g), newUndrainCommand(g), newPurgeCommand(g), newLocateCommand(g), newStatsCommand(g),
		newInspectCommand(g), newTopCommand(g), newLogCommand(g), newWarmCommand(g), newVersionCommand(g))
	return root
}

// exitCode maps the admin client's errors to cachectl's exit statuses.
func exitCode(err error) int {
	var netErr net.Error
	switch {
	case errors.Is(err, admin.ErrUnauthenticated):
		return command.ExitUnauthenticated
	case errors.Is(err, admin.ErrNotFound):
		return command.ExitNotFound
	case errors.Is(err, admin.ErrInvalid):
		return command.ExitUsage
	case errors.Is(err, admin.ErrUnavailable), errors.Is(err, admin.ErrNodeUnavailable), errors.Is(err, admin.ErrNoNodeAnswered),
		errors.As(err, &netErr):
		return command.ExitUnreachable
	}
	return 0
}
