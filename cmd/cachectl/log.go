package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/logquery"
)

func newLogCommand(g *globalOptions) *cobra.Command {
	var f admin.LogFilter
	var nodes []string
	var format string
	var rate int
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Stream access-log records from every node (or some), filtered, as JSON lines, NCSA, full accounts or a template",
		Long: `Stream the access-log records of every node, or of --node ones, as varnishlog and
varnishncsa do: filtered by host, path prefix, status (404, or a class: 5xx), cache status
(X-Cache), route, minimum duration, and a filter expression (--filter, as varnishlog -q):

  status >= 500 and route == relayed and duration > 100ms
  reason == set-cookie or req.User-Agent ~ "^curl/"
  not (cache == HIT) and resp.Content-Type ~ "^image/"

Fields: status, bytes (numbers); duration, and with --full lookup, collapse_wait,
origin_first_byte, store (durations, with a unit: 100ms); method, host, path, proto, cache,
route, reason, node, served_by, client, forwarded_for, request_id, trace_id, key, referer,
user_agent, start, and with --full peers (text: == != and ~ !~ with a regular expression);
req.NAME and resp.NAME are the request's and the answer's header fields (--full). Combine
with and, or, not and parentheses.

--full shows, per request, the client request's fields, each request made on its behalf
(to the owner it was relayed to, with the owner's own stages and origin request; to the
origin) with its status and the wait for its answer, the answer's fields, and the time per
stage (lookup, collapse wait, origin first byte, store). Credentials are shown as REDACTED.

--format: json (one object a line), ncsa (NCSA combined, varnishncsa's default), text (an
account a request, the default with --full), or a template with {field} placeholders, the
same names as the filter: --format '{request_id} {status} {reason} {duration}ms {req.User-Agent}'.

Each node sends at most --rate records a second and drops (and counts) what is beyond it or
what this stream is too slow for, so a stream never slows serving. Ctrl-C ends it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pr, err := checkLogFlags(&f, format, rate)
			if err != nil {
				return err
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
					node := n.GetMember().GetId()
					wg.Go(func() {
						err := c.StreamLog(cmd.Context(), n, f, pr.ncsa, rate, func(line string) {
							text := pr.print(node, line)
							mu.Lock()
							fmt.Fprint(out, text)
							mu.Unlock()
						})
						if err != nil {
							fmt.Fprintf(os.Stderr, "cachectl log: %s\n", shown(err.Error())) // the others keep streaming
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
	fl.StringVarP(&f.Expr, "filter", "q", "", `only the records this expression selects: status >= 500 and route == relayed and duration > 100ms`)
	fl.BoolVar(&f.Full, "full", false, "full records: the request's and answer's fields, the requests made for it, the time per stage")
	fl.StringVar(&format, "format", "", "json, ncsa, text (the default with --full; else json), or a template: '{status} {reason} {path}'")
	fl.IntVar(&rate, "rate", 200, "records a second each node sends at most")
	return cmd
}

// checkLogFlags refuses flags that cannot select or show anything, naming
// the flag, and returns how records are printed. A template that shows
// what only full records carry asks for them.
func checkLogFlags(f *admin.LogFilter, format string, rate int) (*logPrinter, error) {
	if f.MinDuration < 0 {
		return nil, command.Usage(fmt.Errorf("--min-duration %s: want a duration of zero or more", f.MinDuration))
	}
	if _, err := admin.ParseLogQuery(f.Expr); err != nil {
		return nil, command.Usage(fmt.Errorf("--filter: %w", err))
	}
	if _, err := admin.ParseLogFilter(f.Query()); err != nil {
		return nil, command.Usage(err)
	}
	if rate < 1 || rate > 5000 {
		return nil, command.Usage(fmt.Errorf("--rate %d: want 1 to 5000 records a second per node", rate))
	}
	pr := &logPrinter{}
	switch {
	case format == "json", format == "" && !f.Full:
		pr.json = true
	case format == "ncsa":
		if f.Full {
			return nil, command.Usage(errors.New("--format ncsa shows no full records: use --format text, json or a template with --full"))
		}
		pr.ncsa = true
	case format == "text", format == "" && f.Full:
	case strings.Contains(format, "{"):
		t, err := logquery.ParseTemplate(format, admin.LogFields)
		if err != nil {
			return nil, command.Usage(fmt.Errorf("--format: %w", err))
		}
		pr.template = t
		f.Full = f.Full || t.Full()
	default:
		return nil, command.Usage(fmt.Errorf("--format %q: want json, ncsa, text, or a template with {field} placeholders such as '{status} {path}'", format))
	}
	return pr, nil
}
