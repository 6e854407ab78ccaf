package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// etcdProcess is Debian's etcd-server run as an external etcd.
type etcdProcess struct {
	*process
	bin, dir, client, peer string
}

func startEtcd(t *testing.T, ctx context.Context) *etcdProcess {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal("etcd is not installed: make test installs Debian's etcd-server (e2e/install-deps.sh)")
	}
	e := &etcdProcess{bin: bin, dir: filepath.Join(t.TempDir(), "etcd"), client: "http://" + freeAddr(t), peer: "http://" + freeAddr(t)}
	e.start(t, ctx)
	return e
}

func (e *etcdProcess) start(t *testing.T, ctx context.Context) {
	t.Helper()
	e.process = startProcess(t, "etcd", e.bin, "--name", "e2e", "--data-dir", e.dir,
		"--listen-client-urls", e.client, "--advertise-client-urls", e.client,
		"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer,
		"--initial-cluster", "e2e="+e.peer)
	if err := e.WaitLine(ctx, "ready to serve client requests"); err != nil {
		t.Fatal(err)
	}
}

// TestExternalEtcdOutage runs the control plane on Debian's etcd-server and
// stops etcd for ten seconds under client load: no client request fails,
// admin reads keep answering from the control plane's view, admin writes fail
// naming etcd, and after etcd returns writes succeed again.
func TestExternalEtcdOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	etcd := startEtcd(t, ctx)
	c := startCluster(t, ctx, 2, etcd.client)

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("name: objects\npath_prefix: /obj/\nmode: sharded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.cachectlText(ctx, "policy", "apply", "-f", policy); err != nil {
		t.Fatal(err)
	}

	// Client load through both nodes, half on cached keys, half on new ones.
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := i % 200
				if i%2 == 1 {
					key = 1000 + w*1_000_000 + i
				}
				nd := c.nodes[i%len(c.nodes)]
				sent.Add(1)
				if _, err := get(client, nd, fmt.Sprintf("/obj/%d?size=256", key), 256); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}

	if err := etcd.Stop(10 * time.Second); err != nil {
		t.Fatalf("stopping etcd: %v", err)
	}
	outageStart := time.Now()
	// While etcd is away: reads of the ring answer from the control plane's
	// view; a write fails and says etcd is the reason.
	var rj ringJSON
	if err := c.cachectl(ctx, &rj, "ring"); err != nil || len(rj.Members) != 2 {
		t.Errorf("ring during the outage: %v (%d members)", err, len(rj.Members))
	}
	err := c.cachectlText(ctx, "policy", "apply", "-f", policy)
	if err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Errorf("policy apply during the outage: %v; want a failure naming etcd", err)
	}
	// The outage lasts ten seconds under load.
	if rest := 10*time.Second - time.Since(outageStart); rest > 0 {
		select {
		case <-time.After(rest):
		case <-ctx.Done():
		}
	}
	etcd.start(t, ctx)

	// Writes succeed again once the control plane reaches etcd.
	if err := eventually(ctx, func() error { return c.cachectlText(ctx, "policy", "apply", "-f", policy) }); err != nil {
		t.Fatalf("policy apply after etcd returned: %v", err)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d client requests failed during the etcd outage; first: %v", failed.Load(), sent.Load(), firstErr.Load())
	}
	t.Logf("%d client requests during a 10s etcd outage, none failed", sent.Load())
}
