// Command cachectl manages a shardcache cluster through the control plane's
// admin API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cachectl: %v\n", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:           "cachectl",
		Short:         "Manage a shardcache cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.register(root)
	root.AddCommand(newRingCommand(g), newNodesCommand(g), newBenchCommand(g), newPolicyCommand(g),
		newDrainCommand(g), newUndrainCommand(g))
	return root
}
