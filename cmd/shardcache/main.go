// Command shardcache runs the parts of a shardcache cluster: `control` (a
// control-plane replica), `node` (a cache node) and `dev` (a whole cluster
// on this machine, for trying it out).
package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
)

func main() { command.Main("shardcache", newRootCommand(), nil) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "shardcache",
		Short: "A sharded HTTP cache cluster with an etcd-backed control plane",
	}
	root.AddCommand(newControlCommand(), newNodeCommand(), newDevCommand(), newOriginCommand(), newDrainCommand(), newCertsCommand(), newVersionCommand())
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

// accessLogOptions choose where a node's access log goes.
type accessLogOptions struct {
	dest   string
	sample float64
}

func (o *accessLogOptions) register(cmd *cobra.Command, def string) {
	cmd.Flags().StringVar(&o.dest, "access-log", def, "access log, one JSON line per request: stdout, stderr, off, or a file to append to")
	cmd.Flags().Float64Var(&o.sample, "access-log-sample", 1, "share of requests logged, in (0, 1]; 5xx answers are always logged")
}

// open returns the access log's writer (nil when off) and what closes it.
func (o *accessLogOptions) open() (io.Writer, func(), error) {
	switch o.dest {
	case "off", "":
		return nil, func() {}, nil
	case "stdout":
		return os.Stdout, func() {}, nil
	case "stderr":
		return os.Stderr, func() {}, nil
	}
	f, err := os.OpenFile(o.dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("--access-log: %w", err)
	}
	return f, func() { f.Close() }, nil
}

// prefixList is a flag of CIDR prefixes (or single addresses), separated
// by commas.
type prefixList struct{ p *[]netip.Prefix }

func (l prefixList) String() string {
	if l.p == nil {
		return ""
	}
	s := make([]string, len(*l.p))
	for i, p := range *l.p {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l prefixList) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return fmt.Errorf("%q is neither a CIDR prefix nor an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		*l.p = append(*l.p, p.Masked())
	}
	return nil
}

func (l prefixList) Type() string { return "cidrs" }
