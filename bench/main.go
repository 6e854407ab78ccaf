// Command bench compares shardcache with the designs it replaces — nginx
// two-tier (hash $request_uri consistent in front of proxy_cache), nginx
// local caches, and Varnish with the shard director — on one machine, with
// the same origin, workload and memory budget. Each system is started, measured
// and stopped in turn; nothing is left running. Results are written to
// bench/results/<date>.md with a PNG chart.
//
//	go run ./bench -shardcache .bin/shardcache -cachectl .bin/cachectl
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runner holds what every scenario needs.
type runner struct {
	shardcache, cachectl, nginx, varnishd, self string
	wrk                                         string // "" when not installed: cachectl bench drives the load
	origin                                      string // base URL of the shared demo origin
	originProc                                  *proc
	nodeArgs                                    []string // extra flags for shardcache nodes
	work                                        string
	quick                                       bool
	relayLatencyOnly                            bool // S5: the latency phase alone
	peerTLS                                     bool // the peer hop over mutual TLS, the control plane its CA
	log                                         io.Writer
}

// measurement is one system's figures in one scenario.
type measurement struct {
	System       string
	ReqPerSec    float64
	P50, P99     float64 // ms
	HitRatio     float64
	OriginReqs   int64
	Offload      float64 // S2s, S2w, S2m: the requests answered without the origin (-1: not read)
	CPUPerReqUs  float64
	WaitPerReqUs float64 // the serving processes' time waiting for a core (-1: not read)
	MBPerSec     float64
	RSSGrowthMiB float64
	ObjsPerNode  float64 // objects stored per instance at the end (-1: not read)
	IdealBound   float64 // S2s: the hit ratio of an ideal cache of as many objects
	ClientErrors int64   // S6: requests the clients saw fail
	Errors       int64
	Note         string
	Runs         int

	// S5, the relay path.
	RelayFraction, HotRelayFraction float64
	P50Local, P50Relayed            float64 // ms
	P99Local, P99Relayed            float64 // ms
	ConnsPer10k                     float64
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "ceiling" {
		ceiling(os.Args[2])
		return
	}
	var o options
	var nodeArgs string
	flag.StringVar(&o.out, "out", "bench/results", "folder of the results")
	flag.StringVar(&o.shardcache, "shardcache", ".bin/shardcache", "shardcache binary")
	flag.StringVar(&o.cachectl, "cachectl", ".bin/cachectl", "cachectl binary")
	flag.StringVar(&o.scenarios, "scenarios", "S0,S1,S2,S2s,S3,S4,S5,S6", "scenarios to run (S2w and S2m, S2 warmed and misses into full caches, only when named)")
	flag.StringVar(&o.systems, "systems", "", "comma-separated systems to run (default: all; shardcache first)")
	flag.BoolVar(&o.quick, "quick", false, "shorter runs (for trying the harness, not for figures)")
	flag.BoolVar(&o.relayLatency, "relay-latency", false, "S5 measures only the relay's latency under S1's load, not the relay fractions")
	flag.BoolVar(&o.peerTLS, "peer-tls", true, "shardcache's peer hop over mutual TLS, certificates from the control plane's CA, as deploy/ runs it (-peer-tls=false: h2c on loopback)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work folder (configurations and logs) after the run")
	flag.StringVar(&nodeArgs, "node-args", "", "extra flags for shardcache nodes, e.g. \"--hot-threshold -1\"")
	flag.DurationVar(&o.soak, "soak", 0, "instead of the scenarios, soak a shardcache cluster this long and chart it")
	flag.Parse()
	o.nodeArgs = strings.Fields(nodeArgs)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// options are the command line's choices.
type options struct {
	out, shardcache, cachectl string
	scenarios, systems        string
	quick, keep, relayLatency bool
	peerTLS                   bool
	nodeArgs                  []string
	soak                      time.Duration
}

func run(ctx context.Context, o options) error {
	systemList, only, quick, keep, out, shardcache, cachectl := o.systems, o.scenarios, o.quick, o.keep, o.out, o.shardcache, o.cachectl
	if systemList != "" {
		var chosen []system
		for _, s := range systems {
			if strings.Contains(","+systemList+",", ","+s.name+",") {
				chosen = append(chosen, s)
			}
		}
		if len(chosen) == 0 || chosen[0].name != "shardcache" {
			return fmt.Errorf("-systems %q: name shardcache first, then any of nginx two-tier, nginx local, varnish shard", systemList)
		}
		systems = chosen
	}
	r := &runner{quick: quick, relayLatencyOnly: o.relayLatency, peerTLS: o.peerTLS, log: os.Stderr, nodeArgs: o.nodeArgs}
	var err error
	for _, b := range []struct {
		dst  *string
		name string
	}{{&r.shardcache, shardcache}, {&r.cachectl, cachectl}} {
		if *b.dst, err = filepath.Abs(b.name); err != nil {
			return err
		}
		if _, err := os.Stat(*b.dst); err != nil {
			return fmt.Errorf("%s: %w (run make build first)", b.name, err)
		}
	}
	if r.nginx, err = exec.LookPath("nginx"); err != nil {
		r.nginx = "/usr/sbin/nginx"
	}
	if r.varnishd, err = exec.LookPath("varnishd"); err != nil {
		r.varnishd = "/usr/sbin/varnishd"
	}
	for _, b := range []string{r.nginx, r.varnishd} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s is not installed (bench/install-deps.sh installs nginx and varnish)", b)
		}
	}
	if w, err := exec.LookPath("wrk"); err == nil {
		r.wrk = w
		fmt.Fprintf(r.log, "load generator: %s (cachectl bench where hit ratios are read from answers)\n", w)
	} else {
		fmt.Fprintln(r.log, "load generator: cachectl bench (wrk is not installed; bench/install-deps.sh installs it)")
	}
	if r.self, err = os.Executable(); err != nil {
		return err
	}
	if r.work, err = os.MkdirTemp("", "shardcache-bench-"); err != nil {
		return err
	}
	// nginx workers run as an unprivileged user: they must reach the folder.
	if err := os.Chmod(r.work, 0o755); err != nil {
		return err
	}
	if keep {
		fmt.Fprintf(r.log, "work folder: %s\n", r.work)
	} else {
		defer os.RemoveAll(r.work)
	}

	originAddr := freePort()
	if r.originProc, err = startProc(r.work, "origin", r.shardcache, "origin", "--listen", originAddr); err != nil {
		return err
	}
	defer r.originProc.stop()
	r.origin = "http://" + originAddr
	if err := waitHTTP(ctx, r.origin+"/", 200); err != nil {
		return err
	}

	if o.soak > 0 {
		return runSoak(ctx, r, o.soak, out)
	}
	report := &report{Date: time.Now().UTC(), Quick: quick, Wrk: r.wrk != "", PeerTLS: r.peerTLS}
	for _, sc := range scenarios {
		if !strings.Contains(","+only+",", ","+sc.id+",") {
			continue
		}
		fmt.Fprintf(r.log, "== %s: %s\n", sc.id, sc.title)
		res, err := sc.run(ctx, r)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.id, err)
		}
		report.Scenarios = append(report.Scenarios, scenarioResult{ID: sc.id, Title: sc.title, Workload: sc.workload(r), Metrics: sc.metrics, Rows: res})
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return report.write(out)
}

// originRequests asks the demo origin how many objects it served.
func (r *runner) originRequests() (int64, error) {
	resp, err := http.Get(r.origin + "/_stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct{ Requests int64 }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, err
	}
	return st.Requests, nil
}

// loadResult is the part of `cachectl bench -o json` the harness reads.
type loadResult struct {
	Requests  int64   `json:"requests"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"requests_per_second"`
	Bytes     int64   `json:"bytes"`
	LatencyMs struct {
		P50, P90, P99, Max float64
	} `json:"latency_ms"`
	HitRatio float64          `json:"hit_ratio"`
	Errors   map[string]int64 `json:"errors"`
}

// load runs cachectl bench with args against targets.
func (r *runner) load(ctx context.Context, targets []string, args ...string) (*loadResult, error) {
	args = append([]string{"bench", "-q", "-o", "json", "--targets", strings.Join(targets, ",")}, args...)
	cmd := exec.CommandContext(ctx, r.cachectl, args...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && len(b) > 0 {
		err = nil // requests failed: counted in the output, which a scenario may expect (S6)
	}
	if err != nil {
		return nil, fmt.Errorf("cachectl %s: %w", strings.Join(args, " "), err)
	}
	var res loadResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("reading cachectl bench output: %w", err)
	}
	return &res, nil
}

// waitBody waits until url answers 200 with a body containing substr.
func waitBody(ctx context.Context, url, substr string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(b), substr) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never reported %q", url, substr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ceiling serves 4 KiB from memory on addr until killed.
func ceiling(addr string) {
	body := make([]byte, 4096)
	size := strconv.Itoa(len(body))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Cache", "HIT")
		w.Header().Set("Content-Length", size)
		w.Write(body)
	}))
}
