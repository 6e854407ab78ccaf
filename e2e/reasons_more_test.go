package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// reasonSlice is the slice size of the sliced policy the reasons below
// use (the smallest a policy may ask for).
const reasonSlice = 64 << 10

// bigSize is an object too large for the memory tier of a node run with
// --memory-max-object 64KiB: its body is read from disk, by Open.
const bigSize = 200_000

// moreReasonOrigin answers /m/ paths for the reasons
// TestReasonsOfSlicesTheStoreAndTheControlPlane needs: /m/s/ver is a
// sliced object of three slices whose version (ETag) the test changes,
// slice 0 revalidated on every use; /m/s/vary a sliced object that varies
// on X-V; /m/big/ objects read from disk; the rest small and fresh.
type moreReasonOrigin struct{ version atomic.Int32 }

func (o *moreReasonOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, p := w.Header(), r.URL.Path
	h.Set("Cache-Control", "max-age=3600")
	switch {
	case p == "/m/s/ver":
		v := byte(o.version.Load())
		h.Set("Etag", fmt.Sprintf(`"v%d"`, v))
		if strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") {
			h.Set("Cache-Control", "max-age=0, must-revalidate") // the head names the version anew each time
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(versionBody(v)))
	case p == "/m/s/vary":
		h.Set("Etag", `"x1"`)
		h.Set("Vary", "X-V")
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader("body of "+p))
	case strings.HasPrefix(p, "/m/big/"):
		h.Set("Content-Type", "application/octet-stream")
		w.Write(randomBody(p, bigSize))
	default:
		io.WriteString(w, "body of "+p)
	}
}

// versionBody is /m/s/ver's body in version v: three slices.
func versionBody(v byte) []byte {
	return bytes.Repeat([]byte{'a' + v}, 3*reasonSlice)
}

// TestReasonsOfSlicesTheStoreAndTheControlPlane makes one request for
// each reason the other reason test cannot set up in its cluster, and
// finds it in the answer's Cache-Status (detail), the node's access log
// and `cachectl log`: slice-no-validator and slice-version (a sliced
// policy), admission (node-2, whose file system is below its
// --disk-min-free), store-error (a body corrupted on disk while node-1
// was stopped), cut-off (the control plane stopped), catching-up (node-1
// restarted on its data directory while the control plane is down).
func TestReasonsOfSlicesTheStoreAndTheControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	access := []string{filepath.Join(dir, "access-1.log"), filepath.Join(dir, "access-2.log")}
	data := filepath.Join(dir, "data-1")
	origin := &moreReasonOrigin{}
	origin.version.Store(1)
	c := startClusterWith(t, ctx, clusterConfig{nodes: 2, origin: origin, nodeArgs: func(i int) []string {
		args := []string{"--hot-threshold", "-1", "--access-log", access[i-1]}
		if i == 1 {
			// A small data file to look for a body in; bodies over 64 KiB
			// read from disk.
			return append(args, "--data-dir", data, "--disk", "64MiB", "--memory-max-object", "64KiB", "--cut-off-revalidate-after", "1s")
		}
		return append(args, "--disk-min-free", "1000TiB") // more than any file system here has free
	}})
	n1, n2 := c.nodes[0], c.nodes[1]
	// Every slice on the node asked (mode local): node-2 stores nothing.
	putPolicy(ctx, t, c, &pb.CachePolicy{Name: "sliced", PathPrefix: "/m/s/", SliceSize: reasonSlice, Mode: pb.CacheMode_CACHE_MODE_LOCAL})
	members := []string{"node-1", "node-2"}
	own := ownedPaths(t, members, "node-1", "/m/own-", 2)
	catch, cut := own[0], own[1]
	big := ownedPaths(t, members, "node-1", "/m/big/", 1)[0]
	admitted := ownedPaths(t, members, "node-2", "/m/adm-", 1)[0]

	client := &http.Client{Timeout: 30 * time.Second}
	send := func(nd *node, path string, hdr ...string) *http.Response {
		t.Helper()
		return request(ctx, t, client, nd, http.MethodGet, path, hdr...)
	}
	probes := 0
	// stream opens `cachectl log` with args and returns its lines once a
	// probe through each node in nds has come through it.
	stream := func(args []string, nds ...*node) *lineBuffer {
		t.Helper()
		lines := &lineBuffer{}
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), append(args, "log")...)
		cmd.Stdout = lines
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for _, nd := range nds {
			err := eventually(ctx, func() error {
				probes++
				id := send(nd, "/m/probe-"+strconv.Itoa(probes)).Header.Get("X-Request-Id")
				if !strings.Contains(lines.String(), `"request_id":"`+id+`"`) {
					return fmt.Errorf("the log stream has not shown probe %s through %s yet", id, nd.id)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return lines
	}
	ids := map[*node]map[string]string{} // request id -> reason, of the phase, by node asked
	// check checks that resp, via nd, has reason, and notes its id.
	check := func(nd *node, resp *http.Response, reason, cache string) {
		t.Helper()
		id, cs := resp.Header.Get("X-Request-Id"), strings.Join(resp.Header.Values("Cache-Status"), ", ")
		first, _, _ := strings.Cut(cs, ",") // the member of the node that decided
		if !strings.Contains(first+";", "; detail="+reason+";") || resp.Header.Get("X-Cache") != cache || id == "" {
			t.Errorf("%s via %s (%s): X-Cache %q, Cache-Status %q, X-Request-Id %q; want %s and detail=%s", resp.Request.URL.Path, nd.id, reason,
				resp.Header.Get("X-Cache"), cs, id, cache, reason)
		}
		if ids[nd] == nil {
			ids[nd] = map[string]string{}
		}
		ids[nd][id] = reason
	}
	// logged waits until lines and the access log of each node asked have
	// the phase's requests, and starts the next phase.
	logged := func(lines *lineBuffer) {
		t.Helper()
		all := map[string]string{}
		for nd, of := range ids {
			file := access[0]
			if nd == n2 {
				file = access[1]
			}
			err := waitLogged(ctx, t, of, map[string]func() (string, error){
				nd.id + "'s access log": func() (string, error) { b, err := os.ReadFile(file); return string(b), err },
			})
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(all, of)
		}
		if err := waitLogged(ctx, t, all, map[string]func() (string, error){"cachectl log": func() (string, error) { return lines.String(), nil }}); err != nil {
			t.Fatal(err)
		}
		ids = map[*node]map[string]string{}
	}

	// The control plane up: the stage is set for every phase, then the
	// sliced policy's reasons and the disk tier's refusal.
	lines := stream(c.controlArgs(), n1, n2)
	for _, p := range []string{catch, cut, big, "/m/s/ver"} {
		send(n1, p)
	}
	// Each slice is stored once its answer is sent: slice 2 is, once a
	// range of it is a HIT.
	slice2 := fmt.Sprintf("bytes=%d-%d", 2*reasonSlice+10, 2*reasonSlice+109)
	err := eventually(ctx, func() error {
		if x := send(n1, "/m/s/ver", "Range", slice2).Header.Get("X-Cache"); x != "HIT" {
			return fmt.Errorf("a range of slice 2: X-Cache %s", x)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A slice that varies on more than its coding is not stored.
	check(n1, send(n1, "/m/s/vary"), "slice-no-validator", "MISS")
	origin.version.Store(2)
	// Slice 0, revalidated, names version 2; slice 2 is stored as version
	// 1. A revalidation of the head may join one of version 1 still in
	// flight, whose answer is a HIT of version 1: the first answer that is
	// not is the one checked.
	err = eventually(ctx, func() error {
		resp := send(n1, "/m/s/ver", "Range", slice2)
		if x := resp.Header.Get("X-Cache"); x == "HIT" {
			return fmt.Errorf("a range of slice 2 after the change: X-Cache %s", x)
		}
		check(n1, resp, "slice-version", "MISS")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check(n2, send(n2, admitted), "admission", "MISS")
	logged(lines)

	// node-1 restarted, its big object's body corrupted on disk meanwhile:
	// the record fails its checksum as it is read, and is fetched anew.
	if err := n1.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	corrupt(t, filepath.Join(data, "cache", "segments"), randomBody(big, bigSize))
	n1.proc = startProcess(t, n1.id, filepath.Join(binDir, "shardcache"), n1.args...)
	c.waitMembers(ctx, n1, 2)
	lines = stream(append(c.controlArgs(), "--node", n1.id), n1)
	check(n1, send(n1, big), "store-error", "MISS")

	// The control plane stopped: once node-1 says it is cut off, what it
	// stored before is confirmed by the origin before it is served. (cut
	// was stored before node-1's restart: before the last the node heard.)
	if err := c.controlProc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	err = eventually(ctx, func() error {
		if v := metric(t, n1, "shardcache_control_plane_cut_off"); v != 1 {
			return fmt.Errorf("node-1's shardcache_control_plane_cut_off is %v", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check(n1, send(n1, cut), "cut-off", "EXPIRED")
	logged(lines)

	// node-1 restarted while the control plane is down: what it stored
	// before is not served until the purges it missed have come.
	if err := n1.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	n1.proc = startProcess(t, n1.id, filepath.Join(binDir, "shardcache"), n1.args...)
	for _, line := range []string{"node serving", "disk tier index loaded"} {
		if err := n1.proc.WaitLine(ctx, line); err != nil {
			t.Fatal(err)
		}
	}
	lines = stream(append(c.controlArgs(), "--nodes", n1.ops), n1)
	check(n1, send(n1, catch), "catching-up", "MISS")
	logged(lines)
}

// corrupt flips a byte in the middle of body where path's file holds it.
func corrupt(t *testing.T, path string, body []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := body[:64]
	buf := make([]byte, 1<<20+len(head))
	for off := int64(0); ; off += 1 << 20 {
		n, err := f.ReadAt(buf, off)
		if i := bytes.Index(buf[:n], head); i >= 0 {
			at := off + int64(i) + int64(len(body)/2)
			if _, err := f.WriteAt([]byte{body[len(body)/2] ^ 0xff}, at); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s does not hold the body to corrupt (%v)", path, err)
		}
	}
}
