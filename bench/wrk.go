package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// wrkScript picks a key at random from keys for every request, and writes
// wrk's summary as one JSON line when it is done.
const wrkScript = `
local keys, size = %d, %d
math.randomseed(os.time() + %d)
request = function()
  return wrk.format("GET", "/obj/" .. math.random(0, keys - 1) .. "?size=" .. size)
end
done = function(summary, latency, requests)
  io.write(string.format('{"requests":%%d,"seconds":%%f,"errors":%%d,"p50":%%f,"p99":%%f}\n',
    summary.requests, summary.duration / 1e6,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout,
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3))
end
`

// wrkResult is one wrk process's summary.
type wrkResult struct {
	Requests int64
	Seconds  float64
	Errors   int64
	P50, P99 float64 // milliseconds
}

// loadWrk drives uniform load over keys objects of size bytes with wrk, a
// C load generator much cheaper than the servers it measures: one wrk
// process (one thread) per target, the connections split between them,
// for d. It reports the requests, the summed rate, the request-weighted
// median and the worst target's p99; hit ratio is left to the caller.
func (r *runner) loadWrk(ctx context.Context, targets []string, keys, size, conns int, d time.Duration) (*loadResult, error) {
	var mu sync.Mutex
	var results []wrkResult
	var firstErr error
	var wg sync.WaitGroup
	for i, t := range targets {
		script := filepath.Join(r.work, fmt.Sprintf("wrk-%d.lua", i))
		if err := os.WriteFile(script, fmt.Appendf(nil, wrkScript, keys, size, i), 0o644); err != nil {
			return nil, err
		}
		c := max(1, conns/len(targets))
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, r.wrk, "-t1", fmt.Sprintf("-c%d", c), fmt.Sprintf("-d%ds", int(d.Seconds())), "--timeout", "10s",
				"-s", script, "http://"+strings.TrimPrefix(t, "http://"))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = firstOf(firstErr, fmt.Errorf("wrk against %s: %w: %s%s", t, err, out, stderr.String()))
				return
			}
			var res wrkResult
			found := false
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &res) == nil {
					found = true
				}
			}
			if !found {
				firstErr = firstOf(firstErr, fmt.Errorf("wrk against %s printed no summary: %s", t, out))
				return
			}
			results = append(results, res)
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	var out loadResult
	var weighted float64
	for _, res := range results {
		out.Requests += res.Requests
		out.PerSecond += float64(res.Requests) / res.Seconds
		out.Seconds = max(out.Seconds, res.Seconds)
		weighted += res.P50 * float64(res.Requests)
		out.LatencyMs.P99 = max(out.LatencyMs.P99, res.P99)
		if res.Errors > 0 {
			if out.Errors == nil {
				out.Errors = map[string]int64{}
			}
			out.Errors["wrk"] += res.Errors
		}
	}
	if out.Requests > 0 {
		out.LatencyMs.P50 = weighted / float64(out.Requests)
	}
	return &out, nil
}

// firstOf keeps the first error.
func firstOf(first, next error) error {
	if first != nil {
		return first
	}
	return next
}
