package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardcache/shardcache/sdk/loopback"
)

// The examples run against a real cluster: TestMain builds shardcache,
// starts `shardcache dev` on free ports and stops it after the tests.
var (
	controlPlane string // address of the dev cluster's control plane
	token        string // its admin token
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shardcache-sdk-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cluster, err := startDevCluster(dir)
	if err != nil {
		// The other tests still run; the examples fail without a cluster.
		fmt.Fprintf(os.Stderr, "the examples need a dev cluster, which did not start: %v\n", err)
	}
	code := m.Run()
	if cluster != nil {
		if err := cluster.stop(15 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the dev cluster: %v\n%s", err, cluster.output())
			code = 1
		}
	}
	// Every goroutine a client starts must end when it is closed.
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.RemoveAll(dir)
	if err != nil {
		code = 1
	}
	os.Exit(code)
}

// devPorts are the ports `shardcache dev` listens on with no offset: the
// control plane, etcd's client and peer URLs, the demo origin, and each
// of the three nodes' client, peer and ops listeners.
var devPorts = []int{7070, 7071, 7072, 8090, 8081, 8082, 8083, 9081, 9082, 9083, 9190, 9191, 9192, 9193}

// readyLine is what `shardcache dev` prints once every node serves with a
// ring holding all of them.
const readyLine = "shardcache dev cluster is up"

// devCluster is a running `shardcache dev`.
type devCluster struct {
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	err   error         // its exit status, once done
	ready chan struct{} // closed when it printed readyLine

	mu  sync.Mutex
	out bytes.Buffer // everything it printed
}

// startDevCluster builds shardcache into dir, starts a dev cluster with its
// token file in dir, and waits until it is ready; it sets controlPlane and
// token.
func startDevCluster(dir string) (*devCluster, error) {
	bin, err := buildShardcache(dir)
	if err != nil {
		return nil, err
	}
	offset, err := portOffset()
	if err != nil {
		return nil, err
	}
	// The dev token file goes under $XDG_RUNTIME_DIR: here, not over the
	// token of a dev cluster the user runs.
	runtimeDir := filepath.Join(dir, "run")
	if err := os.Mkdir(runtimeDir, 0o700); err != nil {
		return nil, err
	}
	c := &devCluster{done: make(chan struct{}), ready: make(chan struct{})}
	c.cmd = exec.Command(bin, "dev", "--port-offset", strconv.Itoa(offset), "--log-level", "warn")
	c.cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtimeDir)
	pr, pw := io.Pipe()
	c.cmd.Stdout, c.cmd.Stderr = pw, pw
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting shardcache dev: %w", err)
	}
	go c.scan(pr)
	go func() {
		c.err = c.cmd.Wait()
		pw.Close()
		close(c.done)
	}()
	select {
	case <-c.ready:
	case <-c.done:
		return nil, fmt.Errorf("shardcache dev exited (%v):\n%s", c.err, c.output())
	case <-time.After(2 * time.Minute):
		err := c.stop(5 * time.Second)
		return nil, fmt.Errorf("shardcache dev was not ready within 2m (stop: %v):\n%s", err, c.output())
	}
	// Each dev cluster's token file is named by its control plane's address.
	controlPlane = net.JoinHostPort("127.0.0.1", strconv.Itoa(devPorts[0]+offset))
	name := "dev-token"
	if offset != 0 {
		name += "-" + strings.ReplaceAll(controlPlane, ":", "_")
	}
	raw, err := os.ReadFile(filepath.Join(runtimeDir, "shardcache", name))
	if err != nil {
		return c, fmt.Errorf("reading the dev token: %w", err)
	}
	token = strings.TrimSpace(string(raw))
	return c, nil
}

// scan keeps the process's output and closes ready at readyLine.
func (c *devCluster) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	seen := false
	for sc.Scan() {
		c.mu.Lock()
		c.out.WriteString(sc.Text() + "\n")
		c.mu.Unlock()
		if !seen && strings.Contains(sc.Text(), readyLine) {
			seen = true
			close(c.ready)
		}
	}
	_, _ = io.Copy(io.Discard, r) // a line too long for the scanner must not block the process
}

func (c *devCluster) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// stop sends SIGTERM and waits for the process to exit, and sends SIGKILL
// when it has not within timeout.
func (c *devCluster) stop(timeout time.Duration) error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		var ee *exec.ExitError
		if errors.As(c.err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				return nil // ended by the signal, without handling it
			}
		}
		return c.err
	case <-time.After(timeout):
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
		return fmt.Errorf("shardcache dev did not stop within %s and was killed", timeout)
	}
}

// buildShardcache builds the shardcache binary into dir from the workspace
// at the repository's root, also when the tests run with GOWORK=off.
func buildShardcache(dir string) (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "shardcache")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shardcache")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building shardcache: %v\n%s", err, out)
	}
	return bin, nil
}

// portOffset returns a --port-offset under which every port of devPorts is
// free right now. The control plane's port comes from loopback.Addr, so the
// others stay below the kernel's ephemeral range.
//
// loopback.Addr hands out ports from a place that depends on the process
// id: in about one run in nine it starts where every offset would push the
// highest port into the ephemeral range. Those candidates are passed over
// without counting, until the hand-out wraps to the low ports.
func portOffset() (int, error) {
	tried := 0
	for range 12000 { // every port loopback hands out, once
		addr, ok := loopback.Addr()
		if !ok {
			break
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		offset := p - devPorts[0]
		if slices.Max(devPorts)+offset >= 32768 {
			continue
		}
		if allFree(offset) {
			return offset, nil
		}
		if tried++; tried == 100 {
			break
		}
	}
	return 0, errors.New("no port offset with every port of the dev cluster free")
}

func allFree(offset int) bool {
	for _, p := range devPorts {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+offset)))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}
