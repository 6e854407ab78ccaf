// Command shardcache runs the parts of a shardcache cluster: `control` (a
// control-plane replica), `node` (a cache node) and `dev` (a whole cluster
// on this machine, for trying it out).
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
)

func main() { command.Main("shardcache", newRootCommand()) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "shardcache",
		Short: "A sharded HTTP cache cluster with an etcd-backed control plane",
	}
	root.AddCommand(newControlCommand(), newNodeCommand(), newDevCommand(), newOriginCommand())
	return root
}

// logOptions are the logging flags every subcommand has.
type logOptions struct {
	level  string
	format string
}

func (o *logOptions) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.level, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&o.format, "log-format", "text", "log format: text or json")
}

func (o *logOptions) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch o.format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", o.format)
}
