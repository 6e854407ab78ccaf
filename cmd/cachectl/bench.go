package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/cmd/internal/loadgen"
	"github.com/shardcache/shardcache/cmd/internal/units"
)

type benchOptions struct {
	*globalOptions
	targets     []string
	path        string
	concurrency int
	duration    time.Duration
	requests    int64
	keys        int
	dist        string
	size        string
	timeout     time.Duration
	seed        uint64
	quiet       bool
}

func newBenchCommand(g *globalOptions) *cobra.Command {
	o := &benchOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Generate HTTP load against nodes and report throughput, latency percentiles and hit ratio",
		Long: `Generate HTTP/1.1 keep-alive load spread round-robin over --targets, with keys drawn
from --dist over --keys objects of --size bytes (GET <target>/obj/<key>?size=<size> by
default, the demo origin's path). Prints req/s, p50/p90/p99/max latency, the X-Cache hit
ratio, bytes and errors by kind.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.targets, "targets", []string{"http://127.0.0.1:8081", "http://127.0.0.1:8082", "http://127.0.0.1:8083"}, "comma-separated base URLs to spread requests over")
	f.StringVar(&o.path, "path", "/obj/{key}?size={size}", "request path; {key} and {size} are replaced")
	f.IntVarP(&o.concurrency, "concurrency", "c", 16, "concurrent clients")
	f.DurationVarP(&o.duration, "duration", "d", 10*time.Second, "how long to run (0: until --requests)")
	f.Int64VarP(&o.requests, "requests", "n", 0, "stop after this many requests (0: until --duration)")
	f.IntVar(&o.keys, "keys", 1000, "number of distinct objects")
	f.StringVar(&o.dist, "dist", "uniform", "key distribution: uniform, sequential or zipf:S")
	f.StringVar(&o.size, "size", "4KiB", "object size, fixed (4KiB) or a range (1KiB-64KiB)")
	f.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "timeout of one request")
	f.Uint64Var(&o.seed, "seed", 0, "seed of the key sequence (0: random)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress line")
	return cmd
}

func (o *benchOptions) run(cmd *cobra.Command) error {
	if err := checkFormat(o.output); err != nil {
		return err
	}
	keys, err := loadgen.ParseKeys(o.dist, o.keys)
	if err != nil {
		return command.Usage(fmt.Errorf("--dist: %w", err))
	}
	sizes, err := loadgen.ParseSizes(o.size)
	if err != nil {
		return command.Usage(fmt.Errorf("--size: %w", err))
	}
	cfg := loadgen.Config{
		Targets: o.targets, Path: o.path, Concurrency: o.concurrency, Duration: o.duration,
		Requests: o.requests, Keys: keys, Sizes: sizes, Timeout: o.timeout, Seed: o.seed,
	}
	var progress func(loadgen.Progress)
	if !o.quiet {
		progress = progressLine(cmd.ErrOrStderr())
	}
	res, err := loadgen.Run(cmd.Context(), cfg, progress)
	if err != nil {
		return err
	}
	if progress != nil {
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err := renderBench(cmd.OutOrStdout(), o.output, res); err != nil {
		return err
	}
	return benchOutcome(res)
}

// failedRequests counts the requests that failed: no answer, an error
// status or a short body (the load generator's error kinds).
func failedRequests(res *loadgen.Result) int64 {
	var n int64
	for _, c := range res.Errors {
		n += c
	}
	return n
}

// benchOutcome fails a run in which requests failed: its throughput is
// not that of a cache serving.
func benchOutcome(res *loadgen.Result) error {
	n := failedRequests(res)
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d requests failed (%s; statuses %s)", n, res.Requests, counts(res.Errors), counts(res.Statuses))
}

// progressLine rewrites one status line on a terminal, and prints a line
// every five seconds elsewhere (logs).
func progressLine(w io.Writer) func(loadgen.Progress) {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return func(p loadgen.Progress) {
		line := fmt.Sprintf("%6.0fs  %10d requests  %9.0f req/s  %d errors", p.Elapsed.Seconds(), p.Requests,
			float64(p.Requests)/p.Elapsed.Seconds(), p.Errors)
		if tty {
			fmt.Fprintf(w, "\r%s", line)
		} else if int(p.Elapsed.Seconds())%5 == 0 {
			fmt.Fprintln(w, line)
		}
	}
}

func renderBench(w io.Writer, format string, res *loadgen.Result) error {
	return render(w, format, res, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "requests\t%d in %.1fs, %d failed\n", res.Requests, res.Seconds, failedRequests(res))
		fmt.Fprintf(tw, "throughput\t%.0f req/s, %s/s\n", res.PerSecond, units.Bytes(int64(float64(res.Bytes)/max(res.Seconds, 1e-9))))
		l := res.LatencyMs
		fmt.Fprintf(tw, "latency\tp50 %.3fms  p90 %.3fms  p99 %.3fms  max %.3fms\n", l.P50, l.P90, l.P99, l.Max)
		fmt.Fprintf(tw, "hit ratio\t%.4f  (X-Cache: %s)\n", res.HitRatio, counts(res.Cache))
		fmt.Fprintf(tw, "bytes\t%s\n", units.Bytes(res.Bytes))
		fmt.Fprintf(tw, "statuses\t%s\n", counts(res.Statuses))
		errs := "none"
		if len(res.Errors) > 0 {
			errs = counts(res.Errors)
		}
		fmt.Fprintf(tw, "errors\t%s\n", errs)
	})
}

// counts prints a map as "a=1 b=2", sorted by key.
func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
