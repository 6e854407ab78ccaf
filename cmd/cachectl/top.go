package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/cmd/internal/units"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newTopCommand(g *globalOptions) *cobra.Command {
	var interval time.Duration
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch the cluster live: per node and in total, refreshed every second",
		Long: `Watch the cluster live, as varnishstat or traffic_top do: per node and in total, the
requests per second, hit ratio, relay fraction, origin requests per second and offload,
p50 and p99 latency, peer bytes per second, memory and disk use, and the hottest keys. The
figures are rates over the last interval, read from every node's ops listener (live
counters, never a stale report); a node that does not answer is shown as unreachable.

Keys: r requests/s, h hit ratio, o origin/s, l p99 latency, n node: sort by that column
(again: reverse); q quits. --once prints one interval's figures and exits (-o json for
scripts).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return command.Usage(fmt.Errorf("--interval %s: want at least 100ms", interval))
			}
			return g.withClient(func(c *admin.Client) error {
				t := &top{c: c, list: g.listNodes, interval: interval, sortBy: 'r', desc: true}
				if once {
					v, err := t.sample(cmd.Context())
					if err != nil {
						return err
					}
					return render(cmd.OutOrStdout(), g.output, v, func(tw *tabwriter.Writer) { topTable(tw, v, t.sortBy, t.desc) })
				}
				return t.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
			})
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval; rates are over it")
	cmd.Flags().BoolVar(&once, "once", false, "print one interval's figures and exit")
	return cmd
}

// topView is one refresh of `cachectl top`.
type topView struct {
	Interval string     `json:"interval"`
	Nodes    []*topNode `json:"nodes"`
	Total    *topNode   `json:"total"`
	HotKeys  []hotKey   `json:"hot_keys"`
}

// topNode is a node's (or the total's) rates over the interval.
type topNode struct {
	Node          string   `json:"node"`
	Unreachable   string   `json:"unreachable,omitempty"`
	RequestsPerS  float64  `json:"requests_per_second"`
	HitRatio      *float64 `json:"hit_ratio"`
	RelayFraction *float64 `json:"relay_fraction"`
	OriginPerS    float64  `json:"origin_requests_per_second"`
	OriginOffload *float64 `json:"origin_offload"`
	P50, P99      *float64 `json:"-"`
	P50Seconds    *float64 `json:"p50_seconds"`
	P99Seconds    *float64 `json:"p99_seconds"`
	PeerBytesPerS float64  `json:"peer_bytes_per_second"`
	MemoryBytes   int64    `json:"memory_bytes"`
	DiskBytes     int64    `json:"disk_bytes"`
	// counts over the interval, for the total; base is what origin is
	// counted against (originBase); sampled: the node was read at both
	// ends of the interval
	requests, hits, relayed, origin, peerAnswers, base float64
	buckets                                            []admin.Bucket
	sampled                                            bool
}

// hotKey is a hot key and the node that reports it.
type hotKey struct {
	Key  string  `json:"key"`
	Node string  `json:"node"`
	Rate float64 `json:"rate_per_minute"`
}

type top struct {
	c        *admin.Client
	list     func(context.Context, *admin.Client) (*pb.ListNodesResponse, error)
	interval time.Duration
	sortBy   rune
	desc     bool
	prev     map[string]*admin.NodeStats
	prevAt   time.Time
}

// read asks every node for its live figures at once.
func (t *top) read(ctx context.Context) (*pb.ListNodesResponse, liveStats, error) {
	resp, err := t.list(ctx, t.c)
	if err != nil {
		return nil, liveStats{}, err
	}
	return resp, readLive(ctx, t.c, resp.GetNodes()), nil
}

// sample reads twice, an interval apart, and returns the rates between.
func (t *top) sample(ctx context.Context) (*topView, error) {
	if _, err := t.next(ctx); err != nil {
		return nil, err
	}
	select {
	case <-time.After(t.interval):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return t.next(ctx)
}

// next reads the nodes and returns the rates since the previous reading.
func (t *top) next(ctx context.Context) (*topView, error) {
	resp, live, err := t.read(ctx)
	if err != nil {
		return nil, err
	}
	stats, errs := live.stats, live.errs
	now := time.Now()
	secs := now.Sub(t.prevAt).Seconds()
	v := &topView{Interval: t.interval.String(), Nodes: []*topNode{}, Total: &topNode{Node: "total"}, HotKeys: []hotKey{}}
	for _, n := range resp.GetNodes() {
		id := n.GetMember().GetId()
		tn := &topNode{Node: id}
		v.Nodes = append(v.Nodes, tn)
		st, ok := stats[id]
		if !ok {
			tn.Unreachable = "unreachable"
			if e := errs[id]; e != nil {
				tn.Unreachable = e.Error()
			}
			continue
		}
		tn.MemoryBytes, tn.DiskBytes = st.Load.GetMemoryBytes(), st.Load.GetDiskBytes()
		v.Total.MemoryBytes += tn.MemoryBytes
		v.Total.DiskBytes += tn.DiskBytes
		for _, k := range st.HotKeys {
			v.HotKeys = append(v.HotKeys, hotKey{Key: k.Key, Node: id, Rate: k.Rate})
		}
		p := t.prev[id]
		if p == nil || secs <= 0 {
			continue
		}
		l, pl := st.Load, p.Load
		delta := func(a, b uint64) float64 {
			if a < b {
				return 0 // the node restarted
			}
			return float64(a - b)
		}
		tn.requests, tn.hits = delta(l.GetRequestsTotal(), pl.GetRequestsTotal()), delta(l.GetHitsTotal(), pl.GetHitsTotal())
		tn.relayed, tn.origin = delta(l.GetRelayedTotal(), pl.GetRelayedTotal()), delta(l.GetOriginRequestsTotal(), pl.GetOriginRequestsTotal())
		tn.peerAnswers = delta(l.GetPeerAnswersTotal(), pl.GetPeerAnswersTotal())
		tn.PeerBytesPerS = delta(l.GetPeerBytesTotal(), pl.GetPeerBytesTotal()) / secs
		tn.buckets = bucketDelta(st.Durations, p.Durations)
		tn.sampled = true
		v.Total.requests += tn.requests
		v.Total.hits += tn.hits
		v.Total.relayed += tn.relayed
		v.Total.origin += tn.origin
		v.Total.PeerBytesPerS += tn.PeerBytesPerS
		v.Total.buckets = addBuckets(v.Total.buckets, tn.buckets)
	}
	if secs > 0 {
		v.rates(secs)
	}
	slices.SortFunc(v.HotKeys, func(a, b hotKey) int { return cmp.Compare(b.Rate, a.Rate) })
	v.HotKeys = v.HotKeys[:min(len(v.HotKeys), 5)]
	t.prev, t.prevAt = stats, now
	return v, nil
}

// rates turns the counts of the nodes sampled, and the total's, into rates
// and ratios: a node's offload against what it answered itself
// (originBase), or against its client requests when the nodes report no
// answers for peers (answersReported); the total's against the client
// requests.
func (v *topView) rates(secs float64) {
	var relayed, answers float64
	for _, tn := range v.Nodes {
		relayed, answers = relayed+tn.relayed, answers+tn.peerAnswers
	}
	byAnswers := answersReported(relayed, answers)
	for _, tn := range v.Nodes {
		if !tn.sampled {
			continue
		}
		tn.base = tn.requests
		if byAnswers {
			tn.base = originBase(tn.requests, tn.relayed, tn.peerAnswers)
		}
		tn.rates(secs)
	}
	v.Total.base = v.Total.requests
	v.Total.rates(secs)
}

// rates turns the interval's counts into rates and ratios.
func (tn *topNode) rates(secs float64) {
	tn.RequestsPerS, tn.OriginPerS = tn.requests/secs, tn.origin/secs
	if tn.requests > 0 {
		hit, relay := tn.hits/tn.requests, tn.relayed/tn.requests
		tn.HitRatio, tn.RelayFraction = &hit, &relay
	}
	if tn.base > 0 {
		offload := 1 - tn.origin/tn.base
		tn.OriginOffload = &offload
	}
	tn.P50, tn.P99 = quantile(tn.buckets, 0.5), quantile(tn.buckets, 0.99)
	tn.P50Seconds, tn.P99Seconds = tn.P50, tn.P99
}

// bucketDelta sums, over every route, the buckets of now minus those of
// before.
func bucketDelta(now, before map[string][]admin.Bucket) []admin.Bucket {
	var out []admin.Bucket
	for route, bs := range now {
		prev := before[route]
		d := make([]admin.Bucket, len(bs))
		for i, b := range bs {
			d[i] = b
			if i < len(prev) && prev[i].LE == b.LE && prev[i].Count <= b.Count {
				d[i].Count -= prev[i].Count
			}
		}
		out = addBuckets(out, d)
	}
	return out
}

// addBuckets adds b to a, bucket by bucket (the same bounds).
func addBuckets(a, b []admin.Bucket) []admin.Bucket {
	if len(a) == 0 {
		return slices.Clone(b)
	}
	for i := range min(len(a), len(b)) {
		a[i].Count += b[i].Count
	}
	return a
}

// quantile estimates the q-quantile of cumulative buckets by linear
// interpolation within the bucket it falls in, as PromQL's
// histogram_quantile does; nil without observations.
func quantile(bs []admin.Bucket, q float64) *float64 {
	if len(bs) == 0 || bs[len(bs)-1].Count == 0 {
		return nil
	}
	rank := q * float64(bs[len(bs)-1].Count)
	lower, below := 0.0, uint64(0)
	for _, b := range bs {
		if float64(b.Count) >= rank {
			v := b.LE
			if b.Count > below && !math.IsInf(b.LE, 1) {
				v = lower + (b.LE-lower)*(rank-float64(below))/float64(b.Count-below)
			}
			if math.IsInf(v, 1) {
				v = lower
			}
			return &v
		}
		lower, below = b.LE, b.Count
	}
	return &lower
}

// run refreshes the view every interval until q, a signal, or ctx ends.
func (t *top) run(ctx context.Context, in io.Reader, out io.Writer) error {
	keys := make(chan rune, 8)
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return err
		}
		defer term.Restore(int(f.Fd()), old)
	}
	go func() {
		r := bufio.NewReader(in)
		for {
			c, _, err := r.ReadRune()
			if err != nil {
				close(keys)
				return
			}
			keys <- c
		}
	}()
	if _, err := t.next(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	var last *topView
	for {
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-keys:
			switch {
			case !ok || c == 'q' || c == 3: // q, or Ctrl-C in raw mode
				fmt.Fprint(out, "\r\n")
				return nil
			case strings.ContainsRune("rholn", c):
				t.desc = c != t.sortBy || !t.desc
				if c != t.sortBy {
					t.desc = c != 'n'
				}
				t.sortBy = c
				if last != nil {
					t.draw(out, last)
				}
			}
		case <-tick.C:
			v, err := t.next(ctx)
			if err != nil {
				fmt.Fprintf(out, "\x1b[H\x1b[2J%v\r\n", err) // the control plane: shown, retried next tick
				continue
			}
			last = v
			t.draw(out, v)
		}
	}
}

// draw clears the screen and writes v, with CRLF line ends (raw mode).
func (t *top) draw(out io.Writer, v *topView) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	topTable(tw, v, t.sortBy, t.desc)
	tw.Flush()
	fmt.Fprintf(out, "\x1b[H\x1b[2Jshardcache top - every %s - %s  (sort: r h o l n, q quits)\r\n\r\n%s",
		t.interval, time.Now().Format("15:04:05"), strings.ReplaceAll(b.String(), "\n", "\r\n"))
}

// topTable writes v, its nodes sorted by the column key by.
func topTable(tw *tabwriter.Writer, v *topView, by rune, desc bool) {
	nodes := slices.Clone(v.Nodes)
	value := func(n *topNode) float64 {
		f := func(p *float64) float64 {
			if p == nil {
				return -1
			}
			return *p
		}
		switch by {
		case 'h':
			return f(n.HitRatio)
		case 'o':
			return n.OriginPerS
		case 'l':
			return f(n.P99)
		}
		return n.RequestsPerS
	}
	slices.SortStableFunc(nodes, func(a, b *topNode) int {
		c := cmp.Compare(value(a), value(b))
		if by == 'n' {
			c = strings.Compare(a.Node, b.Node)
		}
		if desc {
			c = -c
		}
		return c
	})
	fmt.Fprintln(tw, "NODE\tREQ/S\tHIT\tRELAY\tORIGIN/S\tOFFLOAD\tP50\tP99\tPEER/S\tMEMORY\tDISK")
	for _, n := range append(nodes, v.Total) {
		if n.Unreachable != "" {
			fmt.Fprintf(tw, "%s\tunreachable\n", shown(n.Node))
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\n", shown(n.Node), n.RequestsPerS, percent(n.HitRatio), percent(n.RelayFraction),
			n.OriginPerS, percent(n.OriginOffload), latency(n.P50), latency(n.P99), units.Bytes(int64(n.PeerBytesPerS)),
			units.Bytes(n.MemoryBytes), units.Bytes(n.DiskBytes))
	}
	if len(v.HotKeys) > 0 {
		fmt.Fprintln(tw, "\nHOT KEY\tNODE\tREQ/MIN")
		for _, k := range v.HotKeys {
			fmt.Fprintf(tw, "%s\t%s\t%.0f\n", shown(k.Key), shown(k.Node), k.Rate)
		}
	}
}

// latency is a duration in seconds, short; "-" for none.
func latency(s *float64) string {
	if s == nil {
		return "-"
	}
	d := time.Duration(*s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
