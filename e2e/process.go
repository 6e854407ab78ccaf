// Package e2e tests shardcache as it runs: it builds the real binaries and
// starts an etcd-backed control plane, several nodes and an origin as
// separate processes, then drives them over HTTP and through cachectl.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/loopback"
)

// process is one started binary. Its combined output is kept so that
// readiness can wait on a log line; a failing test shows its last
// failureLines lines.
type process struct {
	name string
	cmd  *exec.Cmd

	mu    sync.Mutex
	out   bytes.Buffer
	lines chan string
	done  chan struct{}
	err   error
}

// failureLines is how much of each process's output a failing test prints.
const failureLines = 200

// startProcess starts bin with args; t's cleanup kills it if still running.
func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), lines: make(chan string, 1024), done: make(chan struct{})}
	// A node without --data-dir keeps its data (its disk tier's data file
	// preallocated) in a temporary directory it removes as it stops; the
	// test kills its processes, so that directory is one of the test's
	// own, removed after them.
	p.cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default: // nobody is waiting for lines now
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- last %d lines of %s ---\n%s", failureLines, name, p.Tail(failureLines))
		}
	})
	return p
}

// Output is everything the process printed so far.
func (p *process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Tail is the last n lines the process printed.
func (p *process) Tail(n int) string {
	out := p.Output()
	i := len(out)
	for range n + 1 {
		j := strings.LastIndexByte(out[:i], '\n')
		if j < 0 {
			return out
		}
		i = j
	}
	return out[i+1:]
}

// WaitLine waits until the process prints a line containing substr.
func (p *process) WaitLine(ctx context.Context, substr string) error {
	if strings.Contains(p.Output(), substr) {
		return nil
	}
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, substr) || strings.Contains(p.Output(), substr) {
				return nil
			}
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before printing %q", p.name, p.err, substr)
		case <-ctx.Done():
			return fmt.Errorf("%s did not print %q: %w", p.name, substr, ctx.Err())
		}
	}
}

// Stop sends SIGTERM and waits for a clean exit, killing after timeout.
func (p *process) Stop(timeout time.Duration) error {
	if p.cmd.Process == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				return nil // ended by the signal we sent, without handling it
			}
		}
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s", p.name, timeout)
	}
}

// Kill sends SIGKILL, by PID, and waits for the process to end.
func (p *process) Kill() {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// freeAddr returns a free loopback address for a process to be started.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, ok := loopback.Addr()
	if !ok {
		t.Fatal("no free port in 20000-31999")
	}
	return addr
}

// buildBinaries builds shardcache and cachectl into dir, from the workspace
// at the repository's root (also when the tests run with GOWORK=off).
// e2eVersion is the version the binaries under test are stamped with, as
// make build stamps them with git describe.
const e2eVersion = "v0.0.0-e2e"

func buildBinaries(dir string) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-ldflags", "-X github.com/shardcache/shardcache/sdk/buildinfo.version="+e2eVersion,
		"-o", dir+string(os.PathSeparator), "./cmd/shardcache", "./cmd/cachectl")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return errors.New("building the binaries failed")
	}
	return nil
}

// eventually calls f until it returns nil or ctx ends; the last error is
// returned. It waits on a condition, never a fixed time.
func eventually(ctx context.Context, f func() error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
