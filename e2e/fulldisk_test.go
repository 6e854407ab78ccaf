package e2e

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// randomBody is size incompressible bytes that depend only on path, so a
// client can check what it got against what the origin sent.
func randomBody(path string, size int) []byte {
	h := fnv.New64a()
	io.WriteString(h, path)
	r := rand.New(rand.NewPCG(h.Sum64(), 1))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestAFillThatRunsOutOfDiskStillAnswersTheClient runs a node process whose
// data directory is a small file system (an 8 MiB tmpfs) under a disk budget
// eight times larger, and fills it past full: every client gets the
// origin's bytes whole, though the disk ran out of space under its fill;
// what was stored before is still served; /readyz says the disk tier is
// degraded, and the node still answers.
func TestAFillThatRunsOutOfDiskStillAnswersTheClient(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() }) // after the node stops (cleanups run last first)

	const size = 300_000
	var fetched atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(randomBody(r.URL.Path, size))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 1, origin: origin, nodeArgs: func(int) []string {
		// Objects larger than the memory tier takes: every one goes to disk.
		return []string{"--data-dir", dir, "--disk", "64MiB", "--disk-min-free", "1", "--memory-max-object", "64KiB"}
	}})
	nd := c.nodes[0]
	client := &http.Client{Timeout: 30 * time.Second}
	fetch := func(path string) string {
		t.Helper()
		resp, err := client.Get("http://" + nd.client + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, randomBody(path, size)) {
			t.Fatalf("GET %s: %d, %d bytes, %v; want 200 and the origin's %d bytes", path, resp.StatusCode, len(b), err, size)
		}
		return resp.Header.Get("X-Cache")
	}

	fetch("/full/0")
	if err := eventually(ctx, func() error {
		if x := fetch("/full/0"); x != "HIT" {
			return fmt.Errorf("/full/0 before the disk is full: %s, want HIT", x)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 50; i++ { // 15 MB on 8 MB: fills run out of space on the way
		fetch("/full/" + strconv.Itoa(i))
	}
	if err := waitReadyz(ctx, nd, "disk=degraded"); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, nd, "shardcache_disk_stripes_stopped"); got == 0 {
		t.Error("shardcache_disk_stripes_stopped is 0 with the disk full")
	}
	if x := fetch("/full/0"); x != "HIT" {
		t.Errorf("an object stored before the disk filled: %s, want HIT", x)
	}
	// New objects are still answered whole, from the origin, storing nothing.
	before := fetched.Load()
	for i := 50; i < 55; i++ {
		fetch("/full/" + strconv.Itoa(i))
	}
	if n := fetched.Load() - before; n != 5 {
		t.Errorf("the origin was asked %d times for 5 new objects, want 5", n)
	}
}
