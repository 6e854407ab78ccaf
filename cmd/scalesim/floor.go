package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardcache/shardcache/controlplane"
)

// The gRPC floor: what a node session's connection costs the control
// plane's process before any of the session's own state, with the
// control plane's transport settings (controlplane.SessionTransport) and
// a stream handler that holds nothing.
var (
	floorConns = flag.Int("grpc-floor", 0, "instead of the control plane, measure gRPC's own memory for this many node connections, one bidirectional stream each, in three shapes (see floorShapes)")
	floorServe = flag.String("grpc-floor-serve", "", "internal: serve one shape of -grpc-floor on -grpc-floor-addr")
	floorAddr  = flag.String("grpc-floor-addr", "", "internal: the address -grpc-floor-serve listens on")
	floorWait  = flag.Duration("grpc-floor-settle", 20*time.Second, "how long -grpc-floor lets each shape run, every connection open, before it reads the memory")
)

// floorPush is how often a shape with pushes sends: a session's heartbeat
// interval at the lease TTL scalesim runs the control plane with (10 s).
const floorPush = 10 * time.Second / 4

// floorShapes are the stream handlers measured: what a session must have
// at least, in goroutines, on top of gRPC's three a connection.
var floorShapes = []struct{ name, what string }{
	{"idle", "the handler waits on the stream's next message; nothing is sent (4 goroutines)"},
	{"push-only", "the handler sends a 200-byte message every 2.5 s and reads nothing (4 goroutines: the fewest a session that pushes can have)"},
	{"session", "the handler reads the node's messages while a goroutine of its own sends a 200-byte message every 2.5 s (5 goroutines: a session's loop and its receiver)"},
}

// floorResult is what a -grpc-floor-serve process reports, per connection.
type floorResult struct {
	RSSKiB, LiveHeapKiB, StackKiB, Goroutines float64
}

// runFloor measures every shape with n connections, each in a server
// process of its own (this program again), and returns the report.
func runFloor(ctx context.Context, n int, settle time.Duration) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# gRPC's memory floor for node sessions, %d connections\n\n", n)
	fmt.Fprintf(&b, "A server process with the control plane's session transport (`controlplane.SessionTransport`: 8 KiB read and shared write buffers, "+
		"static 1 MiB windows, keepalive), %d client connections from this process, one bidirectional stream each, and a handler that keeps no state. "+
		"Read %s after the last stream opened: RSS growth over the process before any connection, per connection; the live heap and goroutine stacks "+
		"after a collection, per connection. Reproduce with `go run ./cmd/scalesim -grpc-floor %d`.\n\n", n, settle, n)
	fmt.Fprintln(&b, "| shape | RSS KiB | live heap KiB | stacks KiB | goroutines | what the handler does |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---|")
	for _, s := range floorShapes {
		r, err := floorShape(ctx, self, s.name, n, settle)
		if err != nil {
			return "", fmt.Errorf("shape %s: %w", s.name, err)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.2f | %s |\n", s.name, r.RSSKiB, r.LiveHeapKiB, r.StackKiB, r.Goroutines, s.what)
	}
	return b.String(), nil
}

func floorShape(ctx context.Context, self, shape string, n int, settle time.Duration) (floorResult, error) {
	addr := freePort()
	ctx, cancel := context.WithTimeout(ctx, settle+5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-grpc-floor-serve", shape, "-grpc-floor-addr", addr, "-grpc-floor", fmt.Sprint(n), "-grpc-floor-settle", settle.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return floorResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return floorResult{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "listening" {
		return floorResult{}, errors.New("the server process did not start")
	}
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return floorResult{}, err
		}
		conns = append(conns, c)
		s, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/floor.Floor/Session")
		if err != nil {
			return floorResult{}, err
		}
		if err := s.SendMsg(&emptypb.Empty{}); err != nil {
			return floorResult{}, err
		}
		go func() { // the node's side reads what is pushed
			for s.RecvMsg(new(wrapperspb.BytesValue)) == nil {
			}
		}()
	}
	if !lines.Scan() {
		return floorResult{}, errors.New("the server process ended without a result")
	}
	var r floorResult
	return r, json.Unmarshal(lines.Bytes(), &r)
}

// serveFloor is the server process of one shape: it says "listening", then
// once n streams are open and settle has passed, its figures per stream as
// a JSON line.
func serveFloor(shape, addr string, n int, settle time.Duration, stdout io.Writer) error {
	var open atomic.Int64
	handler := func(_ any, st grpc.ServerStream) error {
		if err := st.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		open.Add(1)
		push := func() error {
			t := time.NewTicker(floorPush)
			defer t.Stop()
			for range t.C {
				if err := st.SendMsg(wrapperspb.Bytes(make([]byte, 200))); err != nil {
					return err
				}
			}
			return nil
		}
		switch shape {
		case "push-only":
			return push()
		case "session":
			go push() //nolint:errcheck // it ends with the stream
		}
		for {
			if err := st.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
		}
	}
	gs := grpc.NewServer(append(controlplane.SessionTransport(10*time.Second), grpc.UnknownServiceHandler(handler))...)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go gs.Serve(l) //nolint:errcheck // the process ends with the measurement
	runtime.GC()
	base := rssBytes()
	fmt.Fprintln(stdout, "listening")
	for open.Load() < int64(n) {
		time.Sleep(50 * time.Millisecond) // polling the count of streams the clients opened
	}
	time.Sleep(settle) // the measured interval itself
	rss := rssBytes()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/sched/goroutines:goroutines"}}
	metrics.Read(s)
	per := func(v uint64) float64 { return float64(v) / float64(n) }
	return json.NewEncoder(stdout).Encode(floorResult{RSSKiB: per(uint64(rss-base)) / 1024, LiveHeapKiB: per(s[0].Value.Uint64()) / 1024,
		StackKiB: per(s[1].Value.Uint64()) / 1024, Goroutines: per(s[2].Value.Uint64())})
}

// rssBytes is this process's resident set.
func rssBytes() int64 {
	rss, _ := memoryOf(os.Getpid())
	return rss
}
