package e2e

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// devPortOffset finds an offset that puts every default port of
// `shardcache dev` (7070-7072, 8081-8083, 8090, 9081-9083, 9190-9193) on a
// free port of the 20000-31999 range.
func devPortOffset(t *testing.T) string {
	t.Helper()
	ports := []int{7070, 7071, 7072, 8081, 8082, 8083, 8090, 9081, 9082, 9083, 9190, 9191, 9192, 9193}
	for range 100 {
		off := 13000 + rand.IntN(9500)
		free := true
		for _, p := range ports {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+off))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return strconv.Itoa(off)
		}
	}
	t.Fatal("no free set of ports for a dev cluster")
	return ""
}

// startDev starts `shardcache dev` and waits for its banner.
func startDev(t *testing.T, ctx context.Context, args ...string) *process {
	t.Helper()
	p := startProcess(t, "dev", filepath.Join(binDir, "shardcache"), append([]string{"dev"}, args...)...)
	if err := p.WaitLine(ctx, "dev cluster is up"); err != nil {
		t.Fatal(err)
	}
	return p
}

func devNode(off string, i int) *node {
	o, _ := strconv.Atoi(off)
	return &node{id: fmt.Sprintf("node-%d", i), client: fmt.Sprintf("127.0.0.1:%d", 8080+i+o), ops: fmt.Sprintf("127.0.0.1:%d", 9190+i+o)}
}

// TestDevDataDirSurvivesRestart warms a dev cluster, stops it, starts it
// again on the same --data-dir, and reads every object back as a hit.
func TestDevDataDirSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := &countingOrigin{counts: map[string]int{}}
	osrv := httptest.NewServer(origin)
	defer osrv.Close()
	dir, off := t.TempDir(), devPortOffset(t)
	args := []string{"--origin", osrv.URL, "--data-dir", dir, "--port-offset", off}
	const objects = 300
	client := &http.Client{}

	dev := startDev(t, ctx, args...)
	for i := range objects {
		if _, err := get(client, devNode(off, 1+i%3), fmt.Sprintf("/obj/%d?size=%d", i, 1000+i), 1000+i); err != nil {
			t.Fatal(err)
		}
	}
	if got := origin.total.Load(); got != objects {
		t.Fatalf("warming made %d origin requests, want %d", got, objects)
	}
	if err := dev.Stop(30 * time.Second); err != nil {
		t.Fatalf("dev did not stop cleanly: %v", err)
	}
	client.CloseIdleConnections()

	startDev(t, ctx, args...)
	for i := range objects {
		resp, err := get(client, devNode(off, 1+(i+1)%3), fmt.Sprintf("/obj/%d?size=%d", i, 1000+i), 1000+i)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("/obj/%d after the restart: X-Cache %q, want HIT", i, resp.Header.Get("X-Cache"))
		}
	}
	if got := origin.total.Load(); got != objects {
		t.Fatalf("after the restart the origin saw %d more requests, want none", got-objects)
	}
}

// hugeSize is the size of the object serveHuge sends: /huge: 1 GiB of deterministic bytes.
const hugeSize = 1 << 30

func hugeBlock(i int, b []byte) {
	for j := range b {
		b[j] = byte(j*31 + i*7 + j>>8)
	}
}

func hugeCRC() uint32 {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	b := make([]byte, 64<<10)
	for i := range hugeSize / len(b) {
		hugeBlock(i, b)
		h.Write(b)
	}
	return h.Sum32()
}

func serveHuge(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "max-age=3600")
	if r.URL.Path != "/huge" {
		return // an empty object
	}
	w.Header().Set("Content-Length", strconv.Itoa(hugeSize))
	b := make([]byte, 64<<10)
	for i := range hugeSize / len(b) {
		hugeBlock(i, b)
		if _, err := w.Write(b); err != nil {
			return
		}
	}
}

// rssKiB reads a field (VmRSS, VmHWM) of /proc/PID/status.
func rssKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			v, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestOneGiBObjectInBoundedMemory fills and serves a 1 GiB object through
// a dev cluster (relayed or not) and checks the process's peak RSS grows
// by less than 64 MiB: the body is streamed, never held.
func TestOneGiBObjectInBoundedMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("needs Linux /proc to reset and read peak RSS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want := make(chan uint32, 1)
	go func() { want <- hugeCRC() }()
	osrv := httptest.NewServer(http.HandlerFunc(serveHuge))
	defer osrv.Close()
	off := devPortOffset(t)
	dev := startDev(t, ctx, "--origin", osrv.URL, "--data-dir", t.TempDir(), "--port-offset", off, "--disk", "4GiB")
	pid := dev.cmd.Process.Pid
	client := &http.Client{}
	// Warm the process up (connections, pools) before the baseline.
	for i := range 30 {
		if _, err := get(client, devNode(off, 1+i%3), fmt.Sprintf("/small/%d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS of the dev process: %v", err)
	}
	base := rssKiB(t, pid, "VmRSS")
	wantCRC := <-want
	for _, status := range []string{"MISS", "HIT"} {
		resp, err := client.Get("http://" + devNode(off, 1).client + "/huge")
		if err != nil {
			t.Fatal(err)
		}
		h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || n != hugeSize || h.Sum32() != wantCRC {
			t.Fatalf("%s: %d bytes, %v, checksum %08x; want %d bytes with checksum %08x", status, n, err, h.Sum32(), hugeSize, wantCRC)
		}
		if got := resp.Header.Get("X-Cache"); got != status {
			t.Fatalf("X-Cache %q, want %s", got, status)
		}
		peak := rssKiB(t, pid, "VmHWM")
		t.Logf("%s of 1 GiB: peak RSS %d MiB over a baseline of %d MiB", status, (peak-base)>>10, base>>10)
		if peak-base >= 64<<10 {
			t.Fatalf("%s of 1 GiB grew the process's peak RSS by %d MiB, want under 64", status, (peak-base)>>10)
		}
	}
}
