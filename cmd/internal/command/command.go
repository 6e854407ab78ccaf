// Package command runs a program's cobra command tree the way every
// shardcache binary does: cancelled by SIGINT or SIGTERM, and an error
// printed as one line with a non-zero exit, never a stack trace or usage.
package command

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Main executes root and exits with status 1 on error.
func Main(name string, root *cobra.Command) {
	root.SilenceUsage, root.SilenceErrors = true, true
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
