// Command scalesim measures the control plane with many nodes on one
// machine: a real control-plane process (shardcache control, embedded
// etcd) and N node sessions in this process, each the nodes' own session
// client (dataplane/session) over its own gRPC connection, acknowledging
// purges as nodes do. It reports join time, ring-epoch propagation to every
// session, purges one at a time (acknowledged by all, and when the last
// node applied them), sustained purges at a given rate (URL, prefix and tag
// in turn), the reconnect of all after a control-plane restart, etcd write
// transactions by what they wrote, and the control plane's memory, and
// ends with one machine-readable "scale:" line. `make scale` runs it with
// 1,000 sessions. With -grpc-floor N it measures instead what gRPC alone
// costs the control plane's process a node connection (floor.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardcache/shardcache/dataplane/session"
	"github.com/shardcache/shardcache/sdk/admin"
)

func main() {
	nodes := flag.Int("nodes", 1000, "node sessions to simulate")
	bin := flag.String("shardcache", ".bin/shardcache", "the shardcache binary (its control plane is measured)")
	out := flag.String("out", "", "also write the report (markdown) to this file")
	rounds := flag.Int("rounds", 10, "epoch changes and purges measured")
	rate := flag.Int("purge-rate", 1000, "purges a second in the sustained run (URL, prefix and tag in turn); 0: none")
	sustain := flag.Duration("sustain", time.Minute, "how long the sustained run lasts")
	window := flag.Duration("epoch-window", 200*time.Millisecond, "the control plane's epoch batch window")
	joinWait := flag.Duration("join-wait", 10*time.Minute, "how long the sessions may take to be established")
	joinRate := flag.Int("join-rate", 0, "sessions started a second, as in a rolling start; 0: all at once")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (the simulated nodes') to the file")
	nodeGC := flag.Int("nodes-gogc", 400, "the simulated nodes' GOGC (their process's collector; the control plane keeps its own)")
	maxRegistering := flag.Int("max-registering", 0, "the control plane's --max-registering (sessions registered at once); 0: its default")
	etcdBin := flag.String("etcd", "", "run this etcd binary in a process of its own for the control plane, as production does (e.g. /usr/bin/etcd); empty: the control plane's embedded etcd")
	purgeProfile := flag.String("purge-profile", "", "profile the control plane and the simulated nodes for -purge-profile-for at the start of the purges one at a time, into this directory")
	purgeProfileFor := flag.Duration("purge-profile-for", 15*time.Second, "how long -purge-profile profiles")
	callersOf := flag.String("purge-callers", "", "run only the sustained run's purge callers against this control plane address (the simulator starts itself so)")
	flag.Parse()
	// report prints r and writes it to -out, or exits with err.
	report := func(r string, err error) {
		if err == nil {
			fmt.Print(r)
			if *out != "" {
				err = os.WriteFile(*out, []byte(r), 0o644)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "scalesim:", err)
			os.Exit(1)
		}
	}
	if *floorServe != "" {
		if err := serveFloor(*floorServe, *floorAddr, *floorConns, *floorWait, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "scalesim: grpc floor server:", err)
			os.Exit(1)
		}
		return
	}
	if *floorConns > 0 {
		raiseFileLimit()
		report(runFloor(context.Background(), *floorConns, *floorWait))
		return
	}
	if *callersOf != "" {
		ctx, cancel := context.WithTimeout(context.Background(), *sustain+2*time.Minute)
		defer cancel()
		if err := runCallers(ctx, *callersOf, *rate, *sustain, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "scalesim: purge callers:", err)
			os.Exit(1)
		}
		return
	}
	raiseFileLimit()
	// The simulated nodes share one heap: a real node's collector sees one
	// session's garbage, this one a thousand's. Collecting less often keeps
	// the simulator's share of the machine for the control plane measured.
	debug.SetGCPercent(*nodeGC)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scalesim:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "scalesim:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	report(run(ctx, config{bin: *bin, nodes: *nodes, rounds: *rounds, rate: *rate, sustain: *sustain, joinRate: *joinRate, window: *window, joinWait: *joinWait, etcd: *etcdBin, maxRegistering: *maxRegistering,
		profileDir: *purgeProfile, profileFor: *purgeProfileFor}))
}

// sim is the simulated nodes and the control plane they talk to.
type sim struct {
	bin, dir              string
	etcdBin               string // run apart when set
	maxRegistering        int
	etcdProc              *exec.Cmd
	window                time.Duration
	control, ops, etcdURL string
	peerURL               string
	proc                  *exec.Cmd
	nodes                 []*simNode
	admin                 *admin.Client
	etcd                  *clientv3.Client
	rings                 *session.EpochCache // shared by the simulated nodes
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startControl starts the control plane on the sim's addresses and etcd
// directory and waits until it serves.
func (s *sim) startControl(ctx context.Context) error {
	args := []string{"control", "--listen", s.control, "--ops", s.ops,
		"--admin-token", "scale-token", "--lease-ttl", "10s", "--epoch-batch-window", s.window.String(), "--log-level", "warn"}
	if s.maxRegistering != 0 {
		args = append(args, "--max-registering", fmt.Sprint(s.maxRegistering))
	}
	if s.etcdBin != "" {
		args = append(args, "--etcd-endpoints", s.etcdURL)
	} else {
		args = append(args, "--etcd-dir", filepath.Join(s.dir, "etcd"), "--etcd-client-url", s.etcdURL, "--etcd-peer-url", s.peerURL)
	}
	cmd, err := s.start(ctx, "control", s.control, s.bin, args...)
	s.proc = cmd
	return err
}

// startEtcd starts etcd apart, compacting as the embedded one does, and
// waits until it listens.
func (s *sim) startEtcd(ctx context.Context) error {
	cmd, err := s.start(ctx, "etcd", strings.TrimPrefix(s.etcdURL, "http://"), s.etcdBin,
		"--name", "scalesim", "--data-dir", filepath.Join(s.dir, "etcd-apart"),
		"--listen-client-urls", s.etcdURL, "--advertise-client-urls", s.etcdURL,
		"--listen-peer-urls", s.peerURL, "--initial-advertise-peer-urls", s.peerURL,
		"--initial-cluster", "scalesim="+s.peerURL, "--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h",
		"--log-level", "warn")
	s.etcdProc = cmd
	return err
}

// start runs bin with args, its output in <name>.log, and waits until addr
// accepts connections.
func (s *sim) start(ctx context.Context, name, addr, bin string, args ...string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	logf, err := os.OpenFile(filepath.Join(s.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return cmd, nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, name+".log"))
			return cmd, fmt.Errorf("%s did not listen within a minute:\n%s", name, b)
		}
		time.Sleep(50 * time.Millisecond) // polling the listener: the process signals nothing else
	}
}

// stopControl stops the control plane by its PID and waits for it.
func (s *sim) stopControl() {
	stopProc(s.proc)
	s.proc = nil
}

// stopProc stops a process the sim started, by its PID, and waits for it.
func stopProc(cmd *exec.Cmd) {
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// memory returns the control plane's resident and peak resident memory.
func (s *sim) memory() (rss, hwm int64) { return memoryOf(s.proc.Process.Pid) }

// memoryOf returns process pid's resident and peak resident memory.
func memoryOf(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// quantile of durations (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// config is what one run measures.
type config struct {
	bin                 string
	nodes, rounds, rate int
	// joinRate paces the sessions' starts, a second; 0 starts them all at once.
	joinRate int
	// window is the control plane's epoch batch window.
	window  time.Duration
	sustain time.Duration
	// joinWait bounds the wait for every session.
	joinWait time.Duration
	// etcd is an etcd binary to run apart; empty: the embedded etcd.
	etcd string
	// maxRegistering is the control plane's --max-registering; 0: its default.
	maxRegistering int
	// profileDir, when set, receives CPU profiles of the purges one at a
	// time (profile.go), profileFor long.
	profileDir string
	profileFor time.Duration
}

// figures are the run's machine-readable results.
type figures struct {
	epochP99, purgeP50, purgeP99 time.Duration
	purgesPerS, writesPerPurge   float64
	kibPerSession                float64
}

// line is the machine-readable summary; a figure not measured is nan.
func (f figures) line(n int) string {
	if f.epochP99 == 0 && f.purgeP99 == 0 {
		return fmt.Sprintf("scale: nodes=%d epoch_p99_ms=nan purge_p50_ms=nan purge_p99_ms=nan purges_per_s=nan etcd_writes_per_purge=nan rss_per_session_kib=nan\n", n)
	}
	return fmt.Sprintf("scale: nodes=%d epoch_p99_ms=%.0f purge_p50_ms=%.0f purge_p99_ms=%.0f purges_per_s=%.0f etcd_writes_per_purge=%.2f rss_per_session_kib=%.0f\n",
		n, msf(f.epochP99), msf(f.purgeP50), msf(f.purgeP99), f.purgesPerS, f.writesPerPurge, f.kibPerSession)
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func run(ctx context.Context, cfg config) (string, error) {
	n, rounds := cfg.nodes, cfg.rounds
	dir, err := os.MkdirTemp("", "shardcache-scalesim-")
	if err != nil {
		return "", err
	}
	if os.Getenv("SCALESIM_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "scalesim: keeping", dir)
		defer func() { fmt.Fprintln(os.Stderr, "scalesim: kept", dir) }()
	}
	s := &sim{bin: cfg.bin, etcdBin: cfg.etcd, maxRegistering: cfg.maxRegistering, window: cfg.window, dir: dir, control: freePort(), ops: freePort(), etcdURL: "http://" + freePort(), peerURL: "http://" + freePort(), rings: &session.EpochCache{}}
	if s.etcdBin != "" {
		err := s.startEtcd(ctx)
		defer stopProc(s.etcdProc)
		if err != nil {
			return "", err
		}
	}
	err = s.startControl(ctx)
	defer s.stopControl()
	if err != nil {
		return "", err
	}
	fmt.Fprintln(os.Stderr, "scalesim: control plane ops listener", s.ops)
	if s.admin, err = admin.New(admin.Config{Address: s.control, Token: "scale-token", Timeout: time.Minute}); err != nil {
		return "", err
	}
	defer s.admin.Close()
	if s.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{s.etcdURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()}); err != nil {
		return "", err
	}
	defer s.etcd.Close()
	wctx, stopCount := context.WithCancel(ctx)
	defer stopCount()
	writes, err := countWrites(wctx, s.etcd, "/shardcache/")
	if err != nil {
		return "", err
	}
	_, base := s.memory()
	var fig figures

	var b strings.Builder
	fmt.Fprintf(&b, "# Control plane at %d nodes, %s\n\n", n, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	etcdWhere := "embedded etcd"
	if s.etcdBin != "" {
		etcdWhere = "etcd in a process of its own, " + s.etcdBin + ", not measured"
	}
	if s.maxRegistering != 0 {
		etcdWhere += fmt.Sprintf(", --max-registering %d", s.maxRegistering)
	}
	fmt.Fprintf(&b, "One control-plane process (%s, lease TTL 10 s, epoch batch window %s, purge acknowledgement batch 50 ms) "+
		"and %d node sessions (the nodes' session client, one gRPC connection each, load reports every 5 s) in one other process, "+
		"on this machine (%d cores; load average %s at the start). Reproduce with `make scale SCALE=%d`.\n\n", etcdWhere, cfg.window, n, runtime.NumCPU(), loadAverage(), n)
	fmt.Fprintln(&b, "| measure | figure |")
	fmt.Fprintln(&b, "|---|---|")

	// Join.
	start := time.Now()
	for i := range n {
		if cfg.joinRate > 0 {
			if wait := time.Duration(i)*time.Second/time.Duration(cfg.joinRate) - time.Since(start); wait > 0 {
				time.Sleep(wait) // pacing the starts, not waiting for a condition
			}
		}
		s.nodes = append(s.nodes, s.startNode(i))
	}
	defer func() {
		// All told to stop, then waited for (one at a time took too long).
		for _, nd := range s.nodes {
			nd.stop()
		}
		for _, nd := range s.nodes {
			<-nd.done
		}
	}()
	jctx, jcancel := context.WithTimeout(ctx, cfg.joinWait)
	err = waitAll(jctx, s.nodes, func(nd *simNode) bool { return nd.client.Connected() })
	jcancel()
	if err != nil {
		// What breaks is a figure too: the report says how far it got.
		connected := 0
		for _, nd := range s.nodes {
			if nd.client.Connected() {
				connected++
			}
		}
		rss, hwm := s.memory()
		fmt.Fprintf(&b, "| %d sessions started (%s) | not all established: %d connected when the wait ended (%v) |\n", n, howStarted(cfg), connected, err)
		fmt.Fprintf(&b, "| control plane memory then | RSS %d MiB, peak %d MiB |\n", rss>>20, hwm>>20)
		fmt.Fprintf(&b, "\nLoad average at the end: %s.\n\n", loadAverage())
		b.WriteString(fig.line(n))
		return b.String(), nil
	}
	joined := time.Since(start)
	// Every session at the epoch with every member.
	var full uint64
	ectx, ecancel := context.WithTimeout(ctx, 10*time.Minute)
	err = waitAll(ectx, s.nodes, func(nd *simNode) bool {
		e := nd.client.Epoch()
		if e > full {
			if ring, err := s.admin.GetRing(ctx, e); err == nil && len(ring.GetMembers()) == n {
				full = e
			}
		}
		return full > 0 && e >= full
	})
	ecancel()
	if err != nil {
		return "", fmt.Errorf("waiting for the epoch of all %d: %w", n, err)
	}
	fmt.Fprintf(&b, "| %d sessions established (%s) | %s |\n", n, howStarted(cfg), ms(joined))
	fmt.Fprintf(&b, "| every session at the epoch with all %d members | %s after the start |\n", n, ms(time.Since(start)))
	rss, hwm := s.memory()
	fig.kibPerSession = float64(rss-base) / float64(n) / 1024
	fmt.Fprintf(&b, "| control plane memory with %d sessions | RSS %d MiB, peak %d MiB (%d MiB before any; %.0f KiB a session) |\n",
		n, rss>>20, hwm>>20, base>>20, fig.kibPerSession)

	if err := s.epochs(ctx, &b, &fig, rounds, writes); err != nil {
		return "", err
	}
	profiled := func() error { return nil }
	if cfg.profileDir != "" {
		profiled = s.profilePhase(ctx, cfg.profileDir, cfg.profileFor)
	}
	if err := s.isolatedPurges(ctx, &b, &fig, rounds, writes); err != nil {
		return "", err
	}
	if err := profiled(); err != nil {
		return "", err
	}
	if cfg.rate > 0 {
		if err := s.sustained(ctx, &b, &fig, cfg.rate, cfg.sustain, writes); err != nil {
			return "", err
		}
	}
	if err := s.restart(ctx, &b); err != nil {
		// What breaks is a figure too: the report goes on.
		fmt.Fprintf(&b, "| control plane stopped and started again: every session established again | not reached: %v |\n", err)
	}
	fmt.Fprintf(&b, "\nLoad average at the end: %s.\n\n", loadAverage())
	b.WriteString(fig.line(n))
	return b.String(), nil
}

// epochs drains and undrains nodes in turn and times each new epoch from
// its write to every session.
func (s *sim) epochs(ctx context.Context, b *strings.Builder, fig *figures, rounds int, writes *writeCount) error {
	var prop, fromChange []time.Duration
	var epochWrites []int64
	for i := range rounds {
		id := s.nodes[i/2].id // drained, then undrained
		w0 := writes.snapshot()
		cur := s.nodes[0].client.Epoch()
		t0 := time.Now()
		var err error
		if i%2 == 0 {
			_, err = s.admin.DrainNode(ctx, id)
		} else {
			_, err = s.admin.UndrainNode(ctx, id)
		}
		if err != nil {
			return err
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Minute)
		err = waitAll(pctx, s.nodes, func(nd *simNode) bool { return nd.client.Epoch() > cur })
		pcancel()
		if err != nil {
			return fmt.Errorf("epoch after %s changed: %w", id, err)
		}
		for _, nd := range s.nodes {
			if at, written, ok := nd.epochAt(cur + 1); ok {
				prop = append(prop, at.Sub(written))
				fromChange = append(fromChange, at.Sub(t0))
			}
		}
		epochWrites = append(epochWrites, writes.snapshot().sub(w0).other)
	}
	fig.epochP99 = quantile(prop, 0.99)
	fmt.Fprintf(b, "| ring epoch from its write to every session (a drain or undrain; %d changes × %d sessions) | p50 %s, p99 %s, max %s |\n",
		rounds, len(s.nodes), ms(quantile(prop, 0.5)), ms(fig.epochP99), ms(quantile(prop, 1)))
	fmt.Fprintf(b, "| the same from the admin call (the batch window and the member write included) | p50 %s, p99 %s, max %s |\n",
		ms(quantile(fromChange, 0.5)), ms(quantile(fromChange, 0.99)), ms(quantile(fromChange, 1)))
	fmt.Fprintf(b, "| etcd write transactions during one epoch change (purges and node status excluded) | %v |\n", epochWrites)
	return nil
}

// isolatedPurges makes purges one at a time, each waited for by all.
func (s *sim) isolatedPurges(ctx context.Context, b *strings.Builder, fig *figures, rounds int, writes *writeCount) error {
	var acked, p99s, reached []time.Duration
	var perPurge []int64
	var status int64
	w0 := writes.snapshot()
	for i := range rounds * 2 {
		wi := writes.snapshot()
		t0 := time.Now()
		st, err := s.admin.PurgeURL(ctx, fmt.Sprintf("http://www.example.com/scale/%d", i), admin.PurgeOptions{RequestID: fmt.Sprintf("iso-%d", i), Wait: 30 * time.Second})
		if err != nil {
			return err
		}
		if !st.GetComplete() {
			return fmt.Errorf("purge %d not acknowledged by %d nodes within 30 s", i, len(st.GetPending()))
		}
		acked = append(acked, time.Since(t0))
		p99s = append(p99s, st.GetAckP99().AsDuration())
		var last time.Time
		for _, nd := range s.nodes {
			if at, ok := nd.purgeAt(fmt.Sprintf("iso-%d", i)); ok && at.After(last) {
				last = at
			}
		}
		reached = append(reached, last.Sub(t0))
		// The watermark batch after the last acknowledgement lands after
		// the answer: count up to the next purge.
		time.Sleep(200 * time.Millisecond) // a pause between purges, not a wait for a condition
		d := writes.snapshot().sub(wi)
		perPurge = append(perPurge, d.purge)
	}
	status = writes.snapshot().sub(w0).status
	fmt.Fprintf(b, "| a URL purge acknowledged by all %d (%d purges one at a time, the admin call's duration) | p50 %s, p99 %s, max %s |\n",
		len(s.nodes), len(acked), ms(quantile(acked, 0.5)), ms(quantile(acked, 0.99)), ms(quantile(acked, 1)))
	fmt.Fprintf(b, "| the same: admin call to applied by the last node | p50 %s, p99 %s |\n", ms(quantile(reached, 0.5)), ms(quantile(reached, 0.99)))
	fmt.Fprintf(b, "| the same as the control plane reports it (ack_p99: acceptance to 99 in 100 nodes' acknowledgements seen) | p50 %s, max %s |\n",
		ms(quantile(p99s, 0.5)), ms(quantile(p99s, 1)))
	fmt.Fprintf(b, "| etcd write transactions per purge (the record, then the watermark batches) | %v |\n", perPurge)
	fmt.Fprintf(b, "| node status and load-report writes meanwhile (reported apart) | %d in %s |\n", status, ms(time.Duration(len(acked))*250*time.Millisecond))
	if fig.purgeP99 == 0 {
		fig.purgeP50, fig.purgeP99 = quantile(acked, 0.5), quantile(acked, 0.99)
		var sum int64
		for _, w := range perPurge {
			sum += w
		}
		fig.writesPerPurge = float64(sum) / float64(len(perPurge))
	}
	return nil
}

// restart stops the control plane and times every session's return.
func (s *sim) restart(ctx context.Context, b *strings.Builder) error {
	s.stopControl()
	stopped := time.Now()
	gctx, gcancel := context.WithTimeout(ctx, time.Minute)
	err := waitAll(gctx, s.nodes, func(nd *simNode) bool { return !nd.client.Connected() })
	gcancel()
	if err != nil {
		return fmt.Errorf("sessions after the control plane stopped: %w", err)
	}
	if err := s.startControl(ctx); err != nil {
		return err
	}
	restarted := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Minute)
	err = waitAll(rctx, s.nodes, func(nd *simNode) bool { return nd.client.Connected() })
	rcancel()
	if err != nil {
		return fmt.Errorf("reconnecting: %w", err)
	}
	fmt.Fprintf(b, "| control plane stopped (SIGTERM), started again on its etcd: every session established again | %s after the restart (%s after the stop; sessions back off up to 10 s) |\n",
		ms(time.Since(restarted)), ms(time.Since(stopped)))
	rss, hwm := s.memory()
	fmt.Fprintf(b, "| control plane memory after the %d reconnects | RSS %d MiB, peak %d MiB |\n", len(s.nodes), rss>>20, hwm>>20)
	return nil
}

// loadAverage is the machine's 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// raiseFileLimit lifts the soft limit of open files to the hard one: each
// session holds a connection.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// nodeLog is where node i's session logs: nowhere, or for the first node
// to standard error with SCALESIM_LOG set.
func (s *sim) nodeLog(i int) *slog.Logger {
	if i == 0 && os.Getenv("SCALESIM_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// howStarted says how the sessions were started.
func howStarted(cfg config) string {
	if cfg.joinRate > 0 {
		return fmt.Sprintf("started %d a second", cfg.joinRate)
	}
	return "all started at once"
}
