package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// writeCount counts etcd write transactions (revisions) under the prefix
// by what they wrote: purges (purge records, watermark records and the
// exceptions written with them), node status (status and last-heard
// records: registrations, policy acknowledgements, the load reports'
// periodic copy) and the rest (members, epochs, sessions).
type writeCount struct {
	purge, status, other atomic.Int64
}

type writes struct{ purge, status, other int64 }

func (w *writeCount) snapshot() writes {
	return writes{w.purge.Load(), w.status.Load(), w.other.Load()}
}

func (a writes) sub(b writes) writes {
	return writes{a.purge - b.purge, a.status - b.status, a.other - b.other}
}

// countWrites watches every key under prefix from now until ctx ends.
func countWrites(ctx context.Context, cli *clientv3.Client, prefix string) (*writeCount, error) {
	resp, err := cli.Get(ctx, "shardcache-scalesim-probe")
	if err != nil {
		return nil, err
	}
	c := &writeCount{}
	wc := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		for wr := range wc {
			kinds := map[int64]int{} // revision -> 0 other, 1 status, 2 purge
			for _, ev := range wr.Events {
				key := strings.TrimPrefix(string(ev.Kv.Key), prefix)
				k := 0
				switch {
				case strings.HasPrefix(key, "purges") || strings.HasPrefix(key, "watermarks/") || strings.HasPrefix(key, "purge-acks/"):
					k = 2
				case strings.HasPrefix(key, "status/") || strings.HasPrefix(key, "seen/"):
					k = 1
				}
				rev := ev.Kv.ModRevision
				if ev.Type == clientv3.EventTypeDelete {
					rev = wr.Header.Revision
				}
				kinds[rev] = max(kinds[rev], k)
			}
			for _, k := range kinds {
				switch k {
				case 2:
					c.purge.Add(1)
				case 1:
					c.status.Add(1)
				default:
					c.other.Add(1)
				}
			}
		}
	}()
	return c, nil
}

// sustained makes rate purges a second for d, URL, prefix and tag in turn,
// each waited for by every node (from the callers' process: callers.go),
// and reports how many were acknowledged by
// all, their latency, the etcd writes they cost and the control plane's
// memory over the run.
func (s *sim) sustained(ctx context.Context, b *strings.Builder, fig *figures, rate int, d time.Duration, writes *writeCount) error {
	var lat, ackP99s []time.Duration
	var done []outcome
	var complete, failed, incomplete int
	var firstErr error
	got := func(o outcome) {
		switch {
		case o.Err != "":
			failed++
			if firstErr == nil {
				firstErr = errors.New(o.Err)
			}
		case !o.Complete:
			incomplete++
		default:
			complete++
			lat = append(lat, o.Took)
			ackP99s = append(ackP99s, o.AckP99)
			done = append(done, o)
		}
	}
	// Every 10 ms, the lowest purge revision applied by any node: when
	// each purge reached every node, apart from its acknowledgement.
	type lowAt struct {
		at  time.Time
		rev int64
	}
	var lows []lowAt
	stopLows := every(10*time.Millisecond, func(now time.Time) {
		low := int64(-1)
		for _, nd := range s.nodes {
			if r := nd.rev.Load(); low < 0 || r < low {
				low = r
			}
		}
		lows = append(lows, lowAt{now, low})
	})
	defer stopLows()
	fmt.Fprintf(os.Stderr, "scalesim: sustained purges start: %d a second for %s\n", rate, d)
	applied0 := s.applied()
	w0 := writes.snapshot()
	rss0, _ := s.memory()
	// The control plane's memory, every 5 s while the callers run: its
	// resident set and its collector's heap goal, which follows the live
	// heap, so that growth with the purges retained can be told from the
	// runtime keeping freed memory.
	var mem []memSample
	stopRSS := every(5*time.Second, func(time.Time) { mem = append(mem, s.memSample()) })
	c, err := s.callers(ctx, rate, d, got)
	stopRSS()
	if err != nil {
		return err
	}
	sent, late, elapsed, window := c.Sent, c.Late, c.Elapsed, c.Window
	rss1, _ := s.memory()
	rssMax := rss1
	for _, m := range mem {
		rssMax = max(rssMax, m.rss)
	}
	// Every node applied every purge (the sessions push them all).
	want := int64(sent)
	actx, acancel := context.WithTimeout(ctx, time.Minute)
	err = waitAll(actx, s.nodes, func(nd *simNode) bool { return nd.applied.Load()-applied0[nd.id] >= want })
	acancel()
	missing := ""
	if err != nil {
		missing = fmt.Sprintf("; not every node applied all of them: %v", err)
	}
	stopLows()
	var reach []time.Duration
	for _, o := range done {
		i, _ := slices.BinarySearchFunc(lows, o.Rev, func(l lowAt, rev int64) int { return cmp.Compare(l.rev, rev) })
		if i < len(lows) {
			reach = append(reach, lows[i].at.Sub(o.Start))
		}
	}
	w := writes.snapshot().sub(w0)
	fmt.Fprintf(b, "| sustained purges: %d a second asked for %s (URL, prefix, tag in turn; %d calls in flight at most, each asking for exceptions only) | %d sent in %s (%.0f a second), the last call ended %s later; %d not sent for want of a free caller; %d acknowledged by all, %d incomplete, %d failed%s%s |\n",
		rate, d, callerWorkers, sent, ms(window), float64(sent)/window.Seconds(), ms(elapsed-window), late, complete, incomplete, failed, errNote(firstErr), missing)
	fmt.Fprintf(b, "| the same: admin call to acknowledged by all | p50 %s, p99 %s, max %s |\n", ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(quantile(lat, 1)))
	fmt.Fprintf(b, "| the same as the control plane reports it (ack_p99: acceptance to 99 in 100 nodes' acknowledgements seen) | p50 %s, p99 %s |\n",
		ms(quantile(ackP99s, 0.5)), ms(quantile(ackP99s, 0.99)))
	fmt.Fprintf(b, "| the same: admin call to applied by every node (sampled every 10 ms) | p50 %s, p99 %s |\n", ms(quantile(reach, 0.5)), ms(quantile(reach, 0.99)))
	fmt.Fprintf(b, "| the same: etcd write transactions | %d for purges (%.3f a purge); %d node status and load reports, %d others, reported apart |\n",
		w.purge, float64(w.purge)/float64(max(sent, 1)), w.status, w.other)
	fmt.Fprintf(b, "| the same: control plane memory | RSS %d MiB before, %d MiB at most, %d MiB after (%d purges more retained) |\n", rss0>>20, rssMax>>20, rss1>>20, sent)
	fmt.Fprintf(b, "| the same: control plane memory every 5 s, RSS / the collector's heap goal | %s |\n", memSeries(mem))
	if first, second := halvesMax(mem); first > 0 {
		fmt.Fprintf(b, "| the same: the largest RSS of the run's second half over its first half's | %d / %d MiB (%+.0f %%) |\n",
			second>>20, first>>20, (float64(second)/float64(first)-1)*100)
	}
	fig.purgeP50, fig.purgeP99 = quantile(lat, 0.5), quantile(lat, 0.99)
	// The rate held: the purges sent in the window and acknowledged by
	// all (however long after it), a second of the window.
	fig.purgesPerS = float64(complete) / window.Seconds()
	fig.writesPerPurge = float64(w.purge) / float64(max(sent, 1))
	return nil
}

// every calls f every period from its own goroutine until the returned
// stop is called; stop returns once f has run for the last time, and may
// be called again.
func every(period time.Duration, f func(now time.Time)) (stop func()) {
	over, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-over:
				return
			case now := <-t.C:
				f(now)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(over) })
		<-stopped
	}
}

func errNote(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf(" (first failure: %v)", err)
}

// applied is how many purges each node has applied, by id.
func (s *sim) applied() map[string]int64 {
	out := make(map[string]int64, len(s.nodes))
	for _, nd := range s.nodes {
		out[nd.id] = nd.applied.Load()
	}
	return out
}

// memSample is the control plane's memory at one time.
type memSample struct{ rss, heapGoal int64 }

// memSample reads the control plane's resident set and, from its
// /metrics, its collector's heap goal (-1 when unread).
func (s *sim) memSample() memSample {
	rss, _ := s.memory()
	m := memSample{rss: rss, heapGoal: -1}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + s.ops + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_next_gc_bytes "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				m.heapGoal = int64(f)
			}
		}
	}
	return m
}

// memSeries prints samples as "RSS/goal" in MiB.
func memSeries(mem []memSample) string {
	if len(mem) == 0 {
		return "none taken"
	}
	parts := make([]string, len(mem))
	for i, m := range mem {
		parts[i] = fmt.Sprintf("%d/%d", m.rss>>20, m.heapGoal>>20)
	}
	return strings.Join(parts, ", ") + " MiB"
}

// halvesMax is the largest RSS of the first and of the second half of
// the samples; 0, 0 with fewer than four.
func halvesMax(mem []memSample) (first, second int64) {
	if len(mem) < 4 {
		return 0, 0
	}
	h := len(mem) / 2
	for i, m := range mem {
		if i < h {
			first = max(first, m.rss)
		} else {
			second = max(second, m.rss)
		}
	}
	return first, second
}
