package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// S5 measures shardcache's relay path itself: how much traffic takes the
// hop with hot-key handling off and on, what the hop costs in latency, and
// how many connections it opens.
var relayScenario = scenario{
	id: "S5", title: "shardcache's relay path, hot-key handling off and on",
	workload: func(r *runner) string {
		fractions := fmt.Sprintf("Relay fraction: S2's workload (%d requests); hottest 1 %%: Zipf s=1.0 over its 1,000 hottest keys (%d requests). ",
			s2Requests(r), s2Requests(r)/3)
		if r.relayLatencyOnly {
			fractions = "Relay fractions not measured (-relay-latency); connections per 10k relayed under S1's load. "
		}
		hop := "the peer hop h2c on loopback. "
		if r.peerTLS {
			hop = "the peer hop over mutual TLS (-peer-tls). "
		}
		return "shardcache only, 3 nodes, " + hop + fractions +
			"Latency of relayed and local requests, req/s and CPU µs/req: S1's all-hit workload and load generator, " +
			"the latencies read from the nodes' duration histograms (interpolated within buckets, as histogram_quantile does)"
	},
	metrics: []string{"relay fraction", "relay fraction, hottest 1 %", "p50 local ms", "p50 relayed ms", "p99 local ms", "p99 relayed ms",
		"connections per 10k relayed", "req/s", "CPU µs/req"},
	run: runS5,
}

func runS5(ctx context.Context, r *runner) ([]measurement, error) {
	var out []measurement
	for _, mode := range []struct {
		name string
		args []string
	}{{"hot keys off", []string{"--hot-threshold", "-1"}}, {"hot keys on", nil}} {
		fmt.Fprintf(r.log, "   %s\n", mode.name)
		saved := r.nodeArgs
		r.nodeArgs = append(append([]string{}, saved...), mode.args...)
		m := measurement{System: "shardcache, " + mode.name, Runs: 1}
		m.RelayFraction, m.HotRelayFraction, m.ConnsPer10k = -1, -1, -1
		err := withSystem(ctx, r, systems[0], s2Memory, func(in *instance) error {
			if r.relayLatencyOnly {
				return nil
			}
			s2, err := relayFraction(ctx, r, in, "--dist", "zipf:1.0", "--keys", "100000", "--size", "16KiB", "-c", "16",
				"-n", strconv.Itoa(s2Requests(r)), "-d", "0", "--seed", "42")
			if err != nil {
				return err
			}
			hot, err := relayFraction(ctx, r, in, "--dist", "zipf:1.0", "--keys", "1000", "--size", "16KiB", "-c", "16",
				"-n", strconv.Itoa(s2Requests(r)/3), "-d", "0", "--seed", "7")
			if err != nil {
				return err
			}
			m.RelayFraction, m.HotRelayFraction = s2.fraction, hot.fraction
			m.ConnsPer10k = s2.connsPer10k
			return nil
		})
		if err == nil {
			err = withSystem(ctx, r, systems[0], 64<<20, func(in *instance) error {
				if _, err := r.load(ctx, in.targets, "--dist", "sequential", "--keys", "1000", "--size", "4KiB", "-n", "3000", "-d", "0", "-c", "3"); err != nil {
					return err
				}
				before, err := scrape(in)
				if err != nil {
					return err
				}
				u0 := usageOf(in.serving)
				res, err := r.loadHits(ctx, in.targets, 1000)
				if err != nil {
					return err
				}
				m.ReqPerSec = res.PerSecond
				m.CPUPerReqUs, _ = usageOf(in.serving).perRequest(u0, res.Requests)
				after, err := scrape(in)
				if err != nil {
					return err
				}
				local, relayed := after.sub(before, "local"), after.sub(before, "relayed")
				n, total, opened := relayCounts(before, after)
				fmt.Fprintf(r.log, "   relayed under S1's load: %.0f of %.0f requests\n", n, total)
				m.P50Local, m.P99Local = local.quantile(.5)*1000, local.quantile(.99)*1000
				m.P50Relayed, m.P99Relayed = relayed.quantile(.5)*1000, relayed.quantile(.99)*1000
				if r.relayLatencyOnly { // the connections opened under S1's load instead of S2's
					m.ConnsPer10k = opened / max(n, 1) * 10000
				}
				return nil
			})
		}
		r.nodeArgs = saved
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

type fraction struct{ fraction, connsPer10k float64 }

// relayFraction runs one load and reads, from the nodes' counters, the share
// of requests relayed and the peer connections opened per 10,000 relays.
func relayFraction(ctx context.Context, r *runner, in *instance, args ...string) (fraction, error) {
	before, err := scrape(in)
	if err != nil {
		return fraction{}, err
	}
	if _, err := r.load(ctx, in.targets, args...); err != nil {
		return fraction{}, err
	}
	after, err := scrape(in)
	if err != nil {
		return fraction{}, err
	}
	relayed, total, opened := relayCounts(before, after)
	f := fraction{}
	if total > 0 {
		f.fraction = relayed / total
	}
	if relayed > 0 {
		f.connsPer10k = opened / relayed * 10000
	}
	return f, nil
}

// relayCounts reads, between two scrapes, the requests relayed, all
// requests, and the peer connections opened.
func relayCounts(before, after samples) (relayed, total, opened float64) {
	delta := func(name, label string) float64 { return after.counter(name, label) - before.counter(name, label) }
	return delta(`shardcache_requests_total`, `route="relayed"`), delta(`shardcache_requests_total`, ""),
		delta(`shardcache_peer_connections_total`, `state="opened"`)
}

// samples are the metric lines of every node, summed by series.
type samples map[string]float64

func scrape(in *instance) (samples, error) {
	s := samples{}
	for _, op := range in.ops {
		resp, err := http.Get("http://" + op + "/metrics")
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") || line == "" {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				continue
			}
			s[line[:i]] += v
		}
		resp.Body.Close()
	}
	return s, nil
}

// counter sums the series of name whose labels contain label.
func (s samples) counter(name, label string) float64 {
	var sum float64
	for series, v := range s {
		if (strings.HasPrefix(series, name+"{") || series == name) && strings.Contains(series, label) {
			sum += v
		}
	}
	return sum
}

// bucketCounts is a classic histogram's cumulative counts by upper bound.
type bucketCounts map[float64]float64

// sub returns the duration histogram of route accumulated between two scrapes.
func (s samples) sub(before samples, route string) bucketCounts {
	b := bucketCounts{}
	for series, v := range s {
		if !strings.HasPrefix(series, "shardcache_request_duration_seconds_bucket{") || !strings.Contains(series, `route="`+route+`"`) {
			continue
		}
		i := strings.Index(series, `le="`)
		le := series[i+4 : i+4+strings.IndexByte(series[i+4:], '"')]
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		b[bound] += v - before[series]
	}
	return b
}

// quantile interpolates linearly within the bucket holding q, as
// Prometheus's histogram_quantile does.
func (b bucketCounts) quantile(q float64) float64 {
	bounds := make([]float64, 0, len(b))
	for le := range b {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || b[math.Inf(1)] == 0 {
		return math.NaN()
	}
	rank := q * b[math.Inf(1)]
	prevBound, prevCount := 0.0, 0.0
	for _, le := range bounds {
		if b[le] >= rank {
			if math.IsInf(le, 1) {
				return prevBound
			}
			return prevBound + (le-prevBound)*(rank-prevCount)/(b[le]-prevCount)
		}
		prevBound, prevCount = le, b[le]
	}
	return prevBound
}
