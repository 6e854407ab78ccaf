package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardcache/shardcache/sdk/loopback"
)

// proc is one started server process. Its output goes to a log file in the
// run's work directory.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(dir, name, bin string, args ...string) (*proc, error) {
	return startProcEnv(dir, name, bin, nil, args...)
}

// oneWorker is the environment of a Go server the bench measures: one P,
// as every nginx instance runs one worker process (worker_processes 1).
// With three instances on a machine of two cores, a Go server left at
// GOMAXPROCS=2 pays for idle Ps spinning and handing work between
// threads that the cores cannot run at once.
var oneWorker = []string{"GOMAXPROCS=1"}

// startProcEnv is startProc with env added to the bench's own environment.
func startProcEnv(dir, name, bin string, env []string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the process by its PID: SIGTERM, then SIGKILL after 10s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tree returns pid and all its descendants (nginx workers, varnish's child).
func tree(pid int) []int {
	parent := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(child); err == nil {
			parent[st.ppid] = append(parent[st.ppid], child)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, parent[out[i]]...)
	}
	return out
}

type stat struct {
	ppid     int
	cpuTicks uint64
}

// readStat reads the parent and the user+system CPU ticks of a process.
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// The command name may hold spaces: fields start after the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ppid, _ := strconv.Atoi(f[1])
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return stat{ppid: ppid, cpuTicks: utime + stime}, nil
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// pidsOf lists the processes and their children (one walk of /proc).
func pidsOf(procs []*proc) []int {
	var pids []int
	for _, p := range procs {
		pids = append(pids, tree(p.cmd.Process.Pid)...)
	}
	return pids
}

// cpuOf is the CPU time used so far by the processes pids.
func cpuOf(pids []int) float64 {
	var ticks uint64
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil {
			ticks += st.cpuTicks
		}
	}
	return float64(ticks) / clockTicks
}

// waitOf sums the time the processes' threads spent runnable but not
// running, waiting for a core (the second field of each thread's
// /proc/<pid>/task/<tid>/schedstat); ok is false where the kernel keeps no
// such figure. A thread that has exited is no longer counted.
func waitOf(pids []int) (secs float64, ok bool) {
	var ns uint64
	for _, pid := range pids {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
			if f := strings.Fields(string(data)); err == nil && len(f) >= 2 {
				v, err := strconv.ParseUint(f[1], 10, 64)
				ns, ok = ns+v, ok || err == nil
			}
		}
	}
	return float64(ns) / 1e9, ok
}

// usage is the CPU and core-wait seconds of a system's serving processes
// at one moment; per request between two of them, see perRequest.
type usage struct{ cpu, wait float64 }

func usageOf(procs []*proc) usage {
	pids := pidsOf(procs)
	w, ok := waitOf(pids)
	if !ok {
		w = -1
	}
	return usage{cpu: cpuOf(pids), wait: w}
}

// perRequest returns the CPU and core-wait µs per request between u0 and
// u (wait -1 where the kernel keeps no wait figure).
func (u usage) perRequest(u0 usage, requests int64) (cpuUs, waitUs float64) {
	n := float64(max(requests, 1))
	cpuUs, waitUs = (u.cpu-u0.cpu)/n*1e6, -1
	if u.wait >= 0 && u0.wait >= 0 {
		waitUs = (u.wait - u0.wait) / n * 1e6
	}
	return cpuUs, waitUs
}

// rssBytes sums VmRSS (or VmHWM, the peak) over the processes' trees.
func rssBytes(procs []*proc, field string) int64 {
	var total int64
	for _, p := range procs {
		for _, pid := range tree(p.cmd.Process.Pid) {
			f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
					kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
					total += kb << 10
				}
			}
			f.Close()
		}
	}
	return total
}

// freePort returns a free loopback address for a server to be started.
func freePort() string {
	addr, ok := loopback.Addr()
	if !ok {
		panic("bench: no free port in 20000-31999")
	}
	return addr
}

// waitHTTP waits until url answers with want.
func waitHTTP(ctx context.Context, url string, want int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never answered %d (last: %v)", url, want, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
