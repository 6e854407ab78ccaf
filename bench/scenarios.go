package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

type scenario struct {
	id, title string
	workload  func(r *runner) string
	metrics   []string // columns of the report table
	run       func(ctx context.Context, r *runner) ([]measurement, error)
}

var scenarios = []scenario{
	{
		id: "S0", title: "one node, one hot object",
		workload: func(r *runner) string {
			return fmt.Sprintf("One instance, one 4 KiB object, warmed; 32 connections (%s), %s per run, median of 3 runs: the cost of a hit with no hop", r.hitsGenerator(), s1Duration(r))
		},
		metrics: []string{"req/s", "p50 ms", "p99 ms", "CPU µs/req", "core wait µs/req"},
		run:     runS0,
	},
	{
		id: "S1", title: "all-hit small objects",
		workload: func(r *runner) string {
			return fmt.Sprintf("1,000 keys × 4 KiB, warmed through every front; uniform keys, 32 connections (%s), %s per run, median of 3 runs; memory 64 MiB per instance", r.hitsGenerator(), s1Duration(r))
		},
		metrics: []string{"req/s", "p50 ms", "p99 ms", "CPU µs/req", "core wait µs/req", "hit ratio"},
		run:     runS1,
	},
	{
		id: "S2", title: "Zipf working set larger than the caches",
		workload: func(r *runner) string {
			return fmt.Sprintf("Zipf s=1.0 over 100,000 keys × 16 KiB, %d requests from cold, 16 clients; total cache memory ≈ 20 %% of the key space (%s per instance)", s2Requests(r), mib(s2Memory))
		},
		metrics: []string{"origin requests", "hit ratio", "objects/node", "p99 ms", "req/s", "CPU µs/req", "core wait µs/req"},
		run:     runS2,
	},
	steadyScenario,
	s2WarmedScenario,
	s2MissesScenario,
	{
		id: "S3", title: "one 1 GiB object through a non-owner",
		workload: func(*runner) string {
			return fmt.Sprintf("GET of one 1 GiB object, %d times in a row (cold, then again), through a front that does not own it (shardcache: 8 MiB slices, so through a front that assembles it); 512 MiB memory and disk per instance; MB/s: the median of the reads after the first; RSS growth of the instance that grew most", 1+s3Again)
		},
		metrics: []string{"MB/s", "RSS growth MiB"},
		run:     runS3,
	},
	{
		id: "S4", title: "a fourth node added, then removed, under the S2 workload",
		workload: func(r *runner) string {
			return fmt.Sprintf("S2's workload in three thirds of %d requests; a fourth node joins after the first and leaves after the second; origin requests beyond the same run without churn", s4Requests(r))
		},
		metrics: []string{"origin requests caused"},
		run:     runS4,
	},
	relayScenario,
	killScenario,
}

// hitsGenerator names what drives the timed hit runs of S0 and S1.
func (r *runner) hitsGenerator() string {
	if r.wrk != "" {
		return "wrk, one process per front"
	}
	return "cachectl bench"
}

func s1Duration(r *runner) time.Duration {
	if r.quick {
		return 2 * time.Second
	}
	return 10 * time.Second
}

func s2Requests(r *runner) int {
	if r.quick {
		return 20000
	}
	return 150000
}

func s4Requests(r *runner) int {
	if r.quick {
		return 15000
	}
	return 90000
}

// s2Memory is a fifth of 100,000 × 16 KiB, spread over three instances.
const s2Memory = 100000 * 16 << 10 / 5 / instances

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// withSystem starts sys as instances instances in a fresh folder, runs f
// and stops it.
func withSystem(ctx context.Context, r *runner, sys system, mem int64, f func(*instance) error) error {
	return withSystemOf(ctx, r, sys, mem, instances, f)
}

// withSystemOf is withSystem with n instances.
func withSystemOf(ctx context.Context, r *runner, sys system, mem int64, n int, f func(*instance) error) error {
	dir, err := os.MkdirTemp(r.work, "run-")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	in, err := sys.start(ctx, r, dir, mem, n)
	if err != nil {
		return fmt.Errorf("starting %s: %w\n%s", sys.name, err, logTails(dir))
	}
	defer in.stop()
	return f(in)
}

// ceilingSystem is a plain net/http server of one 4 KiB answer from memory.
var ceilingSystem = system{"ceiling: net/http from memory", startCeiling}

func runS0(ctx context.Context, r *runner) ([]measurement, error) {
	return runHits(ctx, r, slices.DeleteFunc(slices.Clone(systems), func(s system) bool {
		return s.name != "shardcache" && s.name != "nginx local"
	}), 1, 1)
}

// runHits measures timedHits over keys objects for each of systems and
// the net/http ceiling, n instances each.
func runHits(ctx context.Context, r *runner, systems []system, n, keys int) ([]measurement, error) {
	var out []measurement
	for _, sys := range append(systems, ceilingSystem) {
		fmt.Fprintf(r.log, "   %s\n", sys.name)
		err := withSystemOf(ctx, r, sys, 64<<20, n, func(in *instance) error {
			m, err := timedHits(ctx, r, sys, in, keys)
			out = append(out, m)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// timedHits warms keys objects through every front, then measures three
// timed runs of uniform hits over them and returns the median.
func timedHits(ctx context.Context, r *runner, sys system, in *instance, keys int) (measurement, error) {
	// Sequential requests reach every key through every front.
	n := strconv.Itoa(max(3, keys*len(in.targets)))
	if _, err := r.load(ctx, in.targets, "--dist", "sequential", "--keys", strconv.Itoa(keys), "--size", "4KiB", "-n", n, "-d", "0", "-c", "3"); err != nil {
		return measurement{}, err
	}
	var runs []measurement
	for range 3 {
		u0 := usageOf(in.serving)
		res, err := r.loadHits(ctx, in.targets, keys)
		if err != nil {
			return measurement{}, err
		}
		cpu, wait := usageOf(in.serving).perRequest(u0, res.Requests)
		runs = append(runs, measurement{System: sys.name, ReqPerSec: res.PerSecond, P50: res.LatencyMs.P50, P99: res.LatencyMs.P99,
			HitRatio: res.HitRatio, CPUPerReqUs: cpu, WaitPerReqUs: wait, Errors: sumErrors(res)})
	}
	return median(runs), nil
}

func runS1(ctx context.Context, r *runner) ([]measurement, error) {
	return runHits(ctx, r, slices.Clone(systems), instances, 1000)
}

// loadHits is one timed run of uniform 4 KiB hits over keys objects: with
// wrk when it is installed (its hit ratio from the origin's count: all hits
// once warmed), else with cachectl bench.
func (r *runner) loadHits(ctx context.Context, targets []string, keys int) (*loadResult, error) {
	if r.wrk == "" {
		return r.load(ctx, targets, "--dist", "uniform", "--keys", strconv.Itoa(keys), "--size", "4KiB", "-c", "32", "-d", s1Duration(r).String())
	}
	o0, err := r.originRequests()
	if err != nil {
		return nil, err
	}
	res, err := r.loadWrk(ctx, targets, keys, 4096, 32, s1Duration(r))
	if err != nil {
		return nil, err
	}
	o1, err := r.originRequests()
	if err != nil {
		return nil, err
	}
	if res.Requests > 0 {
		res.HitRatio = offload(o1-o0, res.Requests)
	}
	return res, nil
}

// offload is the share of requests answered without the origin, from the
// origin's count of what it served meanwhile; requests is not zero.
func offload(origin, requests int64) float64 {
	return 1 - float64(origin)/float64(requests)
}

// syncedShardcache is shardcache with every disk record fsynced before it
// is renamed into place (--disk-sync data), for S2: what durability costs.
var syncedShardcache = system{"shardcache, --disk-sync data", func(ctx context.Context, r *runner, dir string, memBytes int64, n int) (*instance, error) {
	saved := r.nodeArgs
	r.nodeArgs = append(slices.Clone(saved), "--disk-sync", "data")
	defer func() { r.nodeArgs = saved }()
	return startShardcache(ctx, r, dir, memBytes, n)
}}

func runS2(ctx context.Context, r *runner) ([]measurement, error) {
	var out []measurement
	for _, sys := range slices.Insert(slices.Clone(systems), 1, syncedShardcache) {
		fmt.Fprintf(r.log, "   %s\n", sys.name)
		err := withSystem(ctx, r, sys, s2Memory, func(in *instance) error {
			o0, err := r.originRequests()
			if err != nil {
				return err
			}
			u0 := usageOf(in.serving)
			res, err := r.load(ctx, in.targets, "--dist", "zipf:1.0", "--keys", "100000", "--size", "16KiB", "-c", "16",
				"-n", strconv.Itoa(s2Requests(r)), "-d", "0", "--seed", "42")
			if err != nil {
				return err
			}
			cpu, wait := usageOf(in.serving).perRequest(u0, res.Requests)
			o1, err := r.originRequests()
			if err != nil {
				return err
			}
			out = append(out, measurement{System: sys.name, OriginReqs: o1 - o0, HitRatio: res.HitRatio, P50: res.LatencyMs.P50, P99: res.LatencyMs.P99,
				ReqPerSec: res.PerSecond, CPUPerReqUs: cpu, WaitPerReqUs: wait, Errors: sumErrors(res), Runs: 1,
				ObjsPerNode: objectsPerNode(ctx, sys, in), Note: errorKinds(res)})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

const (
	bigSize   = 1 << 30
	sliceSize = 8 << 20
)

// s3Again is how many times S3 reads its object again once it is cached:
// a single read of a second or so moves by a third between runs.
const s3Again = 3

func runS3(ctx context.Context, r *runner) ([]measurement, error) {
	var out []measurement
	path := fmt.Sprintf("/obj/big?size=%d", bigSize)
	for _, sys := range systems {
		fmt.Fprintf(r.log, "   %s\n", sys.name)
		err := withSystem(ctx, r, sys, 512<<20, func(in *instance) error {
			target := in.targets[0]
			if sys.name == "shardcache" {
				target = nonOwner(in.targets, "http127.0.0.1"+path)
				if err := sliceBigObjects(ctx, r, in); err != nil {
					return err
				}
			}
			rss0 := make([]int64, len(in.serving))
			for i, p := range in.serving {
				rss0[i] = rssBytes([]*proc{p}, "VmRSS")
			}
			var rates []float64
			var origin [2]int64 // origin requests of the first read and of the rest: objects not kept
			short := ""
			for i := range 1 + s3Again {
				o0, err := r.originRequests()
				if err != nil {
					return err
				}
				res, err := r.load(ctx, []string{target}, "--path", path, "--keys", "1", "-n", "1", "-d", "0", "-c", "1", "--request-timeout", "5m")
				if err != nil {
					return err
				}
				if res.Bytes != bigSize && short == "" {
					// Recorded, not fatal: a system that cannot pass a
					// 1 GiB object whole is a finding.
					short = fmt.Sprintf("; read %d returned %d bytes of %d", i+1, res.Bytes, bigSize)
				}
				rates = append(rates, float64(res.Bytes)/res.Seconds/1e6)
				o1, err := r.originRequests()
				if err != nil {
					return err
				}
				origin[min(i, 1)] += o1 - o0
			}
			var growth int64
			for i, p := range in.serving {
				growth = max(growth, rssBytes([]*proc{p}, "VmHWM")-rss0[i])
			}
			again := slices.Clone(rates[1:])
			slices.Sort(again)
			agains := make([]string, len(rates)-1)
			for i, v := range rates[1:] {
				agains[i] = fmt.Sprintf("%.0f", v)
			}
			m := measurement{System: sys.name, MBPerSec: again[len(again)/2], RSSGrowthMiB: float64(growth) / (1 << 20),
				Note: fmt.Sprintf("cold %.0f MB/s (%d origin requests), again %s MB/s (%d)%s", rates[0], origin[0], strings.Join(agains, ", "), origin[1], short), Runs: len(again)}
			if short != "" {
				m.MBPerSec = -1 // no rate for an answer that broke off
			}
			out = append(out, m)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sliceBigObjects applies a policy caching S3's object as 8 MiB slices and
// waits until every node runs it.
func sliceBigObjects(ctx context.Context, r *runner, in *instance) error {
	cmd := exec.CommandContext(ctx, r.cachectl, "--control-plane", in.control, "--token", "bench", "policy", "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(fmt.Sprintf("name: large\npath_prefix: /obj/big\nslice_size: %d\n", sliceSize))
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("cachectl policy apply: %w: %s", err, b)
	}
	var rev int64
	if _, err := fmt.Sscanf(string(b), "policy large applied (revision %d)", &rev); err != nil {
		return fmt.Errorf("cachectl policy apply said %q", b)
	}
	for _, op := range in.ops {
		if err := waitBody(ctx, "http://"+op+"/metrics", fmt.Sprintf("shardcache_policy_revision %d", rev)); err != nil {
			return err
		}
	}
	return nil
}

// nonOwner returns a front that does not own key in the shardcache ring of
// node-1..node-3 (targets are in node order).
func nonOwner(targets []string, key string) string {
	members := make([]ring.Member, len(targets))
	for i := range targets {
		members[i] = ring.Member{ID: fmt.Sprintf("node-%d", i+1)}
	}
	rg, _ := ring.New(1, members)
	owner := rg.Owner(key).ID
	for i, t := range targets {
		if fmt.Sprintf("node-%d", i+1) != owner {
			return t
		}
	}
	return targets[0]
}

// churner adds and removes a fourth member of a running system.
type churner interface {
	add(ctx context.Context) error
	remove(ctx context.Context) error
}

func runS4(ctx context.Context, r *runner) ([]measurement, error) {
	var out []measurement
	third := s4Requests(r) / 3
	phases := func(in *instance, ch churner) ([3]int64, error) {
		var origin [3]int64
		for i := range 3 {
			if ch != nil && i == 1 {
				if err := ch.add(ctx); err != nil {
					return origin, err
				}
			}
			if ch != nil && i == 2 {
				if err := ch.remove(ctx); err != nil {
					return origin, err
				}
			}
			o0, err := r.originRequests()
			if err != nil {
				return origin, err
			}
			if _, err := r.load(ctx, in.targets, "--dist", "zipf:1.0", "--keys", "100000", "--size", "16KiB", "-c", "16",
				"-n", strconv.Itoa(third), "-d", "0", "--seed", strconv.Itoa(42+i)); err != nil {
				return origin, err
			}
			o1, err := r.originRequests()
			if err != nil {
				return origin, err
			}
			origin[i] = o1 - o0
		}
		return origin, nil
	}
	for _, sys := range systems {
		newChurner := churners[sys.name]
		if newChurner == nil {
			out = append(out, measurement{System: sys.name, OriginReqs: -1, Note: "not measured: no membership change to make"})
			continue
		}
		fmt.Fprintf(r.log, "   %s\n", sys.name)
		var base, churn [3]int64
		err := withSystem(ctx, r, sys, s2Memory, func(in *instance) (err error) {
			base, err = phases(in, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		err = withSystem(ctx, r, sys, s2Memory, func(in *instance) (err error) {
			ch, err := newChurner(r, in)
			if err != nil {
				return err
			}
			churn, err = phases(in, ch)
			return err
		})
		if err != nil {
			return nil, err
		}
		added, removed := churn[1]-base[1], churn[2]-base[2]
		// Fewer origin requests than without churn (a drained node's keys
		// handed off, its memory added meanwhile) count as none caused.
		out = append(out, measurement{System: sys.name, OriginReqs: max(added+removed, 0),
			Note: fmt.Sprintf("join +%d, leave +%d (origin requests per third without churn: %d, %d, %d)", added, removed, base[0], base[1], base[2]), Runs: 1})
	}
	return out, nil
}

// churners make the fourth-node change for the systems that have one.
var churners = map[string]func(*runner, *instance) (churner, error){
	"shardcache":     newShardcacheChurner,
	"nginx two-tier": newNginxChurner,
}

type shardcacheChurner struct {
	r     *runner
	in    *instance
	node4 *proc
}

func newShardcacheChurner(r *runner, in *instance) (churner, error) {
	return &shardcacheChurner{r: r, in: in}, nil
}

func (c *shardcacheChurner) add(ctx context.Context) error {
	op := freePort()
	p, err := startProcEnv(c.in.dir, "node-4", c.r.shardcache, oneWorker, "node", "--id", "node-4", "--client", freePort(), "--peer", freePort(),
		"--ops", op, "--control-plane", c.in.control, "--origin", c.r.origin, "--memory", fmt.Sprint(s2Memory), "--log-level", "warn")
	if err != nil {
		return err
	}
	c.node4 = p
	c.in.all = append(c.in.all, p)
	if err := waitBody(ctx, "http://"+op+"/readyz", "members=4"); err != nil {
		return err
	}
	return waitNodesMembers(ctx, c.in, 4)
}

// remove drains the fourth node, as an operator would before deleting it:
// it leaves the ring and serves its keys to their new owners by handoff
// while the next third runs; it is stopped with the rest of the system.
func (c *shardcacheChurner) remove(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, c.r.cachectl, "--control-plane", c.in.control, "--token", "bench", "drain", "node-4").CombinedOutput()
	if err != nil {
		return fmt.Errorf("cachectl drain node-4: %w: %s", err, out)
	}
	return waitNodesMembers(ctx, c.in, 3)
}

// waitNodesMembers waits until every first-three node serves an epoch of n.
func waitNodesMembers(ctx context.Context, in *instance, n int) error {
	for _, p := range in.serving {
		op := p.cmd.Args[slices.Index(p.cmd.Args, "--ops")+1]
		if err := waitBody(ctx, "http://"+op+"/readyz", fmt.Sprintf("members=%d", n)); err != nil {
			return err
		}
	}
	return nil
}

// nginxChurner rewrites every instance's upstream list with a fourth cache
// tier and reloads them (SIGHUP), as an ingress controller would.
type nginxChurner struct {
	r     *runner
	in    *instance
	node4 *proc
	extra string
}

func newNginxChurner(r *runner, in *instance) (churner, error) {
	return &nginxChurner{r: r, in: in}, nil
}

func (c *nginxChurner) reload(peers []string) error {
	for i, p := range c.in.serving[:instances] {
		if _, err := nginxConf(c.in.dir, i+1, c.in.fronts[i], c.in.caches[i], peers, c.r.origin, s2Memory); err != nil {
			return err
		}
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			return err
		}
	}
	// nginx acknowledges a reload only in its log; new workers take the
	// configuration within moments. Give the old workers time to finish.
	time.Sleep(time.Second)
	return nil
}

func (c *nginxChurner) add(ctx context.Context) error {
	c.extra = freePort()
	peers := append(slices.Clone(c.in.caches), c.extra)
	conf, err := nginxConf(c.in.dir, 4, "", c.extra, peers, c.r.origin, s2Memory)
	if err != nil {
		return err
	}
	p, err := startProc(c.in.dir, "nginx-4", c.r.nginx, "-c", conf, "-e", filepath.Join(filepath.Dir(conf), "error.log"))
	if err != nil {
		return err
	}
	c.node4 = p
	c.in.all = append(c.in.all, p)
	if err := waitHTTP(ctx, "http://"+c.extra+"/", 200); err != nil {
		return err
	}
	return c.reload(peers)
}

func (c *nginxChurner) remove(ctx context.Context) error {
	if err := c.reload(c.in.caches); err != nil {
		return err
	}
	c.node4.stop()
	return nil
}

// errorKinds names the kinds of the run's errors, for a note.
func errorKinds(res *loadResult) string {
	if len(res.Errors) == 0 {
		return ""
	}
	kinds := make([]string, 0, len(res.Errors))
	for k, v := range res.Errors {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, v))
	}
	slices.Sort(kinds)
	return "errors by kind: " + strings.Join(kinds, ", ") + ";"
}

func sumErrors(res *loadResult) int64 {
	var n int64
	for _, v := range res.Errors {
		n += v
	}
	return n
}

// median returns the run with the median req/s.
func median(runs []measurement) measurement {
	slices.SortFunc(runs, func(a, b measurement) int {
		switch {
		case a.ReqPerSec < b.ReqPerSec:
			return -1
		case a.ReqPerSec > b.ReqPerSec:
			return 1
		}
		return 0
	})
	m := runs[len(runs)/2]
	m.Runs = len(runs)
	return m
}

// logTails returns the last lines of every process log in dir, for an error
// message (the folder is removed when the run ends).
func logTails(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(l), strings.Join(lines[max(0, len(lines)-5):], "\n"))
	}
	return b.String()
}
