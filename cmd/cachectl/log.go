package main

import (
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newLogCommand(g *globalOptions) *cobra.Command {
	var f admin.LogFilter
	var nodes []string
	var format string
	var rate int
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Stream access-log records from every node (or some), filtered, as JSON lines or NCSA",
		Long: `Stream the access-log records of every node, or of --node ones, as varnishlog and
varnishncsa do: filtered by host, path prefix, status (404, or a class: 5xx), cache status
(X-Cache), route, and minimum duration; as JSON lines or in the NCSA combined format
(--format ncsa, varnishncsa's default). Each node sends at most --rate records a second and
drops (and counts) what is beyond it or what this stream is too slow for, so a stream never
slows serving. Ctrl-C ends it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.MinDuration < 0 {
				return command.Usage(fmt.Errorf("--min-duration %s: want a duration of zero or more", f.MinDuration))
			}
			if _, err := admin.ParseLogFilter(f.Query()); err != nil {
				return err
			}
			if format != "json" && format != "ncsa" {
				return command.Usage(fmt.Errorf("--format %q: want json or ncsa", format))
			}
			if rate < 1 || rate > 5000 {
				return command.Usage(fmt.Errorf("--rate %d: want 1 to 5000 records a second per node", rate))
			}
			return g.withClient(func(c *admin.Client) error {
				resp, err := g.listNodes(cmd.Context(), c)
				if err != nil {
					return err
				}
				var mu sync.Mutex
				out := cmd.OutOrStdout()
				var wg sync.WaitGroup
				found := 0
				for _, n := range resp.GetNodes() {
					if len(nodes) > 0 && !slices.Contains(nodes, n.GetMember().GetId()) {
						continue
					}
					found++
					wg.Go(func() {
						err := c.StreamLog(cmd.Context(), n, f, format == "ncsa", rate, func(line string) {
							mu.Lock()
							fmt.Fprintln(out, line)
							mu.Unlock()
						})
						if err != nil {
							fmt.Fprintf(os.Stderr, "cachectl log: %v\n", err) // the others keep streaming
						}
					})
				}
				if found == 0 {
					return fmt.Errorf("no node named %v among the cluster's %d", nodes, len(resp.GetNodes()))
				}
				wg.Wait()
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&nodes, "node", nil, "only these nodes (repeat, or comma-separated)")
	fl.StringVar(&f.Host, "host", "", "only requests for this host")
	fl.StringVar(&f.PathPrefix, "path-prefix", "", "only request URIs starting with this")
	fl.StringVar(&f.Status, "status", "", "only this status (404) or class (5xx)")
	fl.StringVar(&f.Cache, "cache", "", "only this cache status (X-Cache: HIT, MISS, BYPASS...)")
	fl.StringVar(&f.Route, "route", "", "only this route (local, relayed, bypass, redirect, sliced)")
	fl.DurationVar(&f.MinDuration, "min-duration", 0, "only requests that took at least this long")
	fl.StringVar(&format, "format", "json", "json (one object a line) or ncsa (NCSA combined)")
	fl.IntVar(&rate, "rate", 200, "records a second each node sends at most")
	return cmd
}
