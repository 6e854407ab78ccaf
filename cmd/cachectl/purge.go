package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardcache/shardcache/cmd/internal/command"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// progressEvery is how long one purge call waits for acknowledgements
// before cachectl reports the nodes it still waits for.
const progressEvery = 2 * time.Second

type purgeOptions struct {
	*globalOptions
	key, prefix, host, tag string
	all, soft              bool
	requestID              string
	wait                   time.Duration
}

func newPurgeCommand(g *globalOptions) *cobra.Command {
	o := &purgeOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "purge [URL | --cache-key KEY | --prefix PREFIX [--host HOST] [--all] | --tag TAG]",
		Short: "Remove a URL, a cache key, a path prefix or a tag from every node",
		Long: `Remove cached objects from every node: every object stored for an absolute URL
(its variants, slices and hot copies included), the objects under one cache key, every
object under a path prefix (of one --host, or of every host), or every object whose
response carried a tag in Surrogate-Key or Cache-Tag. With --soft, what matches is
kept but marked stale: it is served as a stale response is, within the policy's
stale-while-revalidate (or stale-if-error while the origin fails), and revalidated
with the origin on its next use.

The control plane records the purge before any node applies it, so a node that is
away applies it when it reconnects, before it serves again. cachectl waits up to --wait
for every node to acknowledge, reporting the nodes it still waits for, and exits
non-zero if some have not. Running it again with the same --request-id purges nothing
twice and reports the first run's outcome.`,
		Example: `  cachectl purge https://www.example.com/index.html
  cachectl purge --prefix /static/ --host www.example.com
  cachectl purge --prefix / --host www.example.com --all
  cachectl purge --tag product-42 --request-id deploy-1234
  cachectl purge --soft --tag product-42`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	f := cmd.Flags()
	// Not --key: that is the global flag of the client certificate's key.
	f.StringVar(&o.key, "cache-key", "", "purge this cache key, exactly as stored")
	f.StringVar(&o.prefix, "prefix", "", `purge every object whose path starts with this prefix (starts with "/")`)
	f.StringVar(&o.host, "host", "", "with --prefix: only this host (default: every host)")
	f.BoolVar(&o.all, "all", false, `with --prefix "/": confirm purging everything of --host, or of every host`)
	f.StringVar(&o.tag, "tag", "", "purge every object tagged with this Surrogate-Key or Cache-Tag")
	f.BoolVar(&o.soft, "soft", false, "mark what matches stale instead of removing it: served within the policy's stale-while-revalidate "+
		"(or stale-if-error while the origin fails) and revalidated on its next use")
	f.StringVar(&o.requestID, "request-id", "", "name of the purge, to repeat it safely or look it up (default: random)")
	f.DurationVar(&o.wait, "wait", 30*time.Second, "how long to wait for every node to acknowledge")
	return cmd
}

// purgeTarget is a validated purge: call sends it, and kind and what name
// it in messages.
type purgeTarget struct {
	kind, what string
	call       func(context.Context, *admin.Client, admin.PurgeOptions) (*pb.PurgeStatus, error)
}

// target checks the arguments and flags and returns the one purge they
// ask for, before anything is sent.
func (o *purgeOptions) target(cmd *cobra.Command, args []string) (*purgeTarget, error) {
	changed := cmd.Flags().Changed
	var given []string
	if len(args) > 0 {
		given = append(given, "URL")
	}
	for _, name := range []string{"cache-key", "prefix", "tag"} {
		if changed(name) {
			given = append(given, "--"+name)
		}
	}
	switch {
	case len(given) == 0:
		return nil, errors.New("give a URL, --cache-key, --prefix or --tag")
	case len(given) > 1:
		return nil, fmt.Errorf("give only one of URL, --cache-key, --prefix and --tag (got %s)", strings.Join(given, " and "))
	case (changed("host") || changed("all")) && !changed("prefix"):
		return nil, errors.New("--host and --all go with --prefix")
	case o.wait <= 0:
		return nil, fmt.Errorf("--wait %s: want a positive duration", o.wait)
	}
	switch {
	case len(args) > 0:
		u, err := parseURL(args[0])
		if err != nil {
			return nil, err
		}
		return &purgeTarget{"url", u.String(), func(ctx context.Context, c *admin.Client, opts admin.PurgeOptions) (*pb.PurgeStatus, error) {
			return c.PurgeURL(ctx, u.String(), opts)
		}}, nil
	case changed("cache-key"):
		if o.key == "" {
			return nil, errors.New("--cache-key is empty")
		}
		return &purgeTarget{"key", o.key, func(ctx context.Context, c *admin.Client, opts admin.PurgeOptions) (*pb.PurgeStatus, error) {
			return c.PurgeKey(ctx, o.key, opts)
		}}, nil
	case changed("prefix"):
		switch {
		case !strings.HasPrefix(o.prefix, "/"):
			return nil, fmt.Errorf("--prefix %q: must start with \"/\"", o.prefix)
		case o.prefix == "/" && !o.all:
			return nil, fmt.Errorf("--prefix / purges everything on %s: add --all to confirm", hostOrEvery(o.host))
		case strings.ContainsAny(o.host, "/:@?# "):
			return nil, fmt.Errorf("--host %q: give a host name without scheme, port or path", o.host)
		}
		return &purgeTarget{"prefix", prefixTarget(o.host, o.prefix), func(ctx context.Context, c *admin.Client, opts admin.PurgeOptions) (*pb.PurgeStatus, error) {
			opts.All = o.all
			return c.PurgePrefix(ctx, o.host, o.prefix, opts)
		}}, nil
	default:
		switch {
		case o.tag == "":
			return nil, errors.New("--tag is empty")
		case strings.ContainsAny(o.tag, " ,"):
			return nil, fmt.Errorf("--tag %q: give one tag, without spaces or commas", o.tag)
		}
		return &purgeTarget{"tag", o.tag, func(ctx context.Context, c *admin.Client, opts admin.PurgeOptions) (*pb.PurgeStatus, error) {
			return c.PurgeTag(ctx, o.tag, opts)
		}}, nil
	}
}

// parseURL accepts an absolute http or https URL with a host, the form
// that purge and locate name an object by.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, fmt.Errorf("URL %q: want an absolute http or https URL with a host, such as https://www.example.com/index.html", s)
	}
	return u, nil
}

func hostOrEvery(host string) string {
	if host == "" {
		return "every host"
	}
	return host
}

// prefixTarget names a prefix purge: "www.example.com/static/", or
// "every host /static/".
func prefixTarget(host, prefix string) string {
	if host == "" {
		return "every host " + prefix
	}
	return host + prefix
}

func (o *purgeOptions) run(cmd *cobra.Command, args []string) error {
	t, err := o.target(cmd, args)
	if err != nil {
		return command.Usage(err)
	}
	id := o.requestID
	if id == "" {
		id = admin.NewRequestID()
	}
	return o.withClient(func(c *admin.Client) error {
		send := func(ctx context.Context, wait time.Duration) (*pb.PurgeStatus, error) {
			return t.call(ctx, c, admin.PurgeOptions{RequestID: id, Wait: wait, Soft: o.soft})
		}
		poll := func(ctx context.Context, wait time.Duration) (*pb.PurgeStatus, error) {
			return c.GetPurge(ctx, id, wait)
		}
		st, err := awaitPurge(cmd.Context(), o.wait, send, poll, cmd.ErrOrStderr())
		if err != nil {
			return fmt.Errorf("purge %s (%s %s): %w", id, t.kind, t.what, err)
		}
		if err := render(cmd.OutOrStdout(), o.output, st, func(tw *tabwriter.Writer) { purgeTable(tw, st) }); err != nil {
			return err
		}
		return purgeOutcome(st, o.wait)
	})
}

// purgeCall sends a purge, or asks for its status, letting the control
// plane wait up to the given time for the nodes' acknowledgements.
type purgeCall func(ctx context.Context, wait time.Duration) (*pb.PurgeStatus, error)

// awaitPurge sends a purge and follows it until every node acknowledged
// or wait has passed, in calls of at most progressEvery, reporting the
// nodes still pending to progress after each.
func awaitPurge(ctx context.Context, wait time.Duration, send, poll purgeCall, progress io.Writer) (*pb.PurgeStatus, error) {
	deadline := time.Now().Add(wait)
	st, err := send(ctx, min(wait, progressEvery))
	for err == nil && !st.GetComplete() && time.Until(deadline) > 0 {
		reportPending(progress, st)
		st, err = poll(ctx, min(time.Until(deadline), progressEvery))
	}
	return st, err
}

// reportPending prints the nodes a purge still waits for.
func reportPending(w io.Writer, st *pb.PurgeStatus) {
	pending := pendingCount(st)
	fmt.Fprintf(w, "waiting for %d of %d nodes: %s\n", pending, pending+int(st.GetAcknowledged()), pendingList(st))
}

// pendingCount is how many nodes a purge waits for, listed or not.
func pendingCount(st *pb.PurgeStatus) int { return len(st.GetPending()) + int(st.GetPendingOmitted()) }

// pendingList names the pending nodes, each cut off from the control plane
// with the time it was last heard from.
func pendingList(st *pb.PurgeStatus) string {
	since := unreachableSince(st)
	var out []string
	for _, n := range st.GetPending() {
		if s, ok := since[n]; ok {
			n += " (unreachable since " + s + ")"
		}
		out = append(out, n)
	}
	if n := st.GetPendingOmitted(); n > 0 {
		out = append(out, fmt.Sprintf("and %d more", n))
	}
	return strings.Join(out, ", ")
}

// unreachableSince maps each node cut off from the control plane to when
// it was last heard from.
func unreachableSince(st *pb.PurgeStatus) map[string]string {
	since := map[string]string{}
	for _, u := range st.GetUnreachable() {
		since[u.GetNodeId()] = u.GetSince().AsTime().UTC().Format(time.RFC3339)
	}
	return since
}

// purgeOutcome is the error for a purge some node has not applied.
func purgeOutcome(st *pb.PurgeStatus, wait time.Duration) error {
	var failed []string
	for _, r := range st.GetResults() {
		if r.GetError() != "" {
			failed = append(failed, r.GetNodeId()+": "+r.GetError())
		}
	}
	id := st.GetPurge().GetId()
	switch p := pendingCount(st); {
	case len(failed) > 0:
		return command.WithCode(command.ExitPartial, fmt.Errorf("purge %s failed on %s", id, strings.Join(failed, "; ")))
	case !st.GetComplete():
		return command.WithCode(command.ExitPartial, fmt.Errorf("purge %s: %d of %d nodes did not acknowledge within %s (%s); it is recorded, and they apply it when they reconnect, before they serve again",
			id, p, p+int(st.GetAcknowledged()), wait, pendingList(st)))
	}
	return nil
}

func purgeTable(tw *tabwriter.Writer, st *pb.PurgeStatus) {
	p := st.GetPurge()
	kind, target := purgeKind(p)
	if p.GetSoft() {
		kind = "soft " + kind
	}
	fmt.Fprintln(tw, "PURGE\tKIND\tTARGET\tREVISION")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", p.GetId(), kind, target, p.GetRevision())
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODE\tREMOVED\tREVISION\tSTATUS")
	for _, r := range st.GetResults() {
		status := "ok"
		switch {
		case r.GetError() != "":
			status = "error: " + r.GetError()
		case r.GetSweeping():
			status = "sweeping"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.GetNodeId(), r.GetObjectsRemoved(), r.GetRevisionApplied(), status)
	}
	since := unreachableSince(st)
	for _, n := range st.GetPending() {
		status := "pending"
		if s, ok := since[n]; ok {
			status += ", unreachable since " + s
		}
		fmt.Fprintf(tw, "%s\t-\t-\t%s\n", n, status)
	}
	if n := st.GetResultsOmitted(); n > 0 {
		fmt.Fprintf(tw, "(%d more acknowledged)\t\t\tok\n", n)
	}
	if n := st.GetPendingOmitted(); n > 0 {
		fmt.Fprintf(tw, "(%d more)\t-\t-\tpending\n", n)
	}
	if p50, p99 := st.GetAckP50(), st.GetAckP99(); p50 != nil || p99 != nil {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "acknowledged after\tp50 %s\tp99 %s\t\n", ackQuantile(p50), ackQuantile(p99))
	}
}

// ackQuantile shows a quantile of a purge's acknowledgements in
// milliseconds, "-" when that share of the nodes had not acknowledged.
func ackQuantile(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", float64(d.AsDuration().Microseconds())/1000)
}

// purgeKind names what a recorded purge matches, as the table shows it.
func purgeKind(p *pb.Purge) (kind, target string) {
	switch p.GetKind() {
	case pb.PurgeKind_PURGE_KIND_URL:
		if p.GetKey() != "" {
			return "key", p.GetKey()
		}
		return "url", p.GetUrl()
	case pb.PurgeKind_PURGE_KIND_PREFIX:
		return "prefix", prefixTarget(p.GetHost(), p.GetPathPrefix())
	case pb.PurgeKind_PURGE_KIND_TAG:
		return "tag", p.GetTag()
	}
	return "-", "-"
}
