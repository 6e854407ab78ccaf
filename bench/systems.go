package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// instance is one running system under test.
type instance struct {
	targets []string // client-facing base URLs
	serving []*proc  // processes whose CPU and memory are measured
	all     []*proc  // everything to stop, in order
	dir     string   // the run's folder (configurations, logs)
	control string   // shardcache: the control plane's address
	ops     []string // shardcache: the nodes' ops addresses (metrics)
	fronts  []string // nginx: tier-1 listen addresses
	caches  []string // nginx: tier-2 (cache) listen addresses
}

func (in *instance) stop() {
	for i := len(in.all) - 1; i >= 0; i-- {
		in.all[i].stop()
	}
}

// system starts one of the compared designs, n instances with a memory
// budget each, against the run's origin.
type system struct {
	name  string
	start func(ctx context.Context, r *runner, dir string, memBytes int64, n int) (*instance, error)
}

var systems = []system{
	{"shardcache", startShardcache},
	{"nginx two-tier", startNginxTwoTier},
	{"nginx local", startNginxLocal},
	{"varnish shard", startVarnish},
}

// instances is how many nodes (or nginx and Varnish instances) a scenario
// runs unless it says otherwise.
const instances = 3

func startShardcache(ctx context.Context, r *runner, dir string, memBytes int64, n int) (*instance, error) {
	control := freePort()
	in := &instance{dir: dir, control: control}
	controlArgs := []string{"control", "--listen", control, "--ops", freePort(),
		"--etcd-dir", filepath.Join(dir, "etcd"), "--etcd-client-url", "http://" + freePort(),
		"--etcd-peer-url", "http://" + freePort(), "--admin-token", "bench", "--epoch-batch-window", "200ms",
		"--log-level", "warn"}
	var nodeTLS []string
	if r.peerTLS {
		// The control plane is the peer hop's CA, its key sealed in etcd.
		seal := filepath.Join(dir, "ca-seal.key")
		if err := os.WriteFile(seal, []byte(strings.Repeat("bench-seal-key-", 4)+"\n"), 0o600); err != nil {
			return nil, err
		}
		controlArgs = append(controlArgs, "--ca", "--ca-seal-key-file", seal)
		nodeTLS = []string{"--peer-certs-from-control-plane"}
	}
	cp, err := startProc(dir, "control", r.shardcache, controlArgs...)
	if err != nil {
		return nil, err
	}
	in.all = append(in.all, cp)
	var ops []string
	for i := 1; i <= n; i++ {
		client, peer, op := freePort(), freePort(), freePort()
		args := append([]string{"node", "--id", fmt.Sprintf("node-%d", i), "--client", client, "--peer", peer, "--ops", op,
			"--control-plane", control, "--origin", r.origin, "--memory", fmt.Sprint(memBytes), "--log-level", "warn",
			// As nginx's max_size: the disk budget equals the memory one. No
			// access log, as nginx's is off.
			"--disk", fmt.Sprint(memBytes), "--max-object", fmt.Sprint(memBytes / 2), "--access-log", "off",
			"--data-dir", filepath.Join(dir, fmt.Sprintf("node-%d-data", i))}, append(nodeTLS, r.nodeArgs...)...)
		n, err := startProcEnv(dir, fmt.Sprintf("node-%d", i), r.shardcache, oneWorker, args...)
		if err != nil {
			in.stop()
			return nil, err
		}
		in.all = append(in.all, n)
		in.serving = append(in.serving, n)
		in.targets = append(in.targets, "http://"+client)
		ops = append(ops, op)
	}
	in.ops = ops
	for _, op := range ops {
		if err := waitBody(ctx, "http://"+op+"/readyz", fmt.Sprintf("members=%d", n)); err != nil {
			in.stop()
			return nil, err
		}
	}
	return in, nil
}

// nginxConf writes one nginx instance's configuration. tier1 is empty for a
// cache-only instance (nginx local).
func nginxConf(dir string, i int, tier1, tier2 string, peers []string, origin string, memBytes int64) (string, error) {
	prefix := filepath.Join(dir, fmt.Sprintf("nginx-%d", i))
	if err := os.MkdirAll(filepath.Join(prefix, "cache"), 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `daemon off;
master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy_temp;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    proxy_cache_path %[1]s/cache levels=1:2 keys_zone=cache:32m max_size=%[2]d inactive=24h use_temp_path=off;
    upstream origin { server %[3]s; keepalive 64; }
`, prefix, memBytes, strings.TrimPrefix(origin, "http://"))
	if tier1 != "" {
		b.WriteString("    upstream cache_tier {\n        hash $request_uri consistent;\n")
		for _, p := range peers {
			fmt.Fprintf(&b, "        server %s;\n", p)
		}
		b.WriteString("        keepalive 64;\n    }\n")
		fmt.Fprintf(&b, `    server {
        listen %s;
        location / {
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_pass http://cache_tier;
        }
    }
`, tier1)
	}
	fmt.Fprintf(&b, `    server {
        listen %s;
        location / {
            proxy_cache cache;
            proxy_cache_key "$scheme$host$request_uri";
            proxy_cache_valid 200 60m;
            proxy_cache_lock on;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_pass http://origin;
            add_header X-Cache $upstream_cache_status;
            add_header X-Cache-Node nginx-%d;
        }
    }
}
`, tier2, i)
	conf := filepath.Join(prefix, "nginx.conf")
	return conf, os.WriteFile(conf, []byte(b.String()), 0o644)
}

func startNginx(ctx context.Context, r *runner, dir string, memBytes int64, n int, twoTier bool) (*instance, error) {
	tier1 := make([]string, n)
	tier2 := make([]string, n)
	for i := range n {
		tier1[i], tier2[i] = freePort(), freePort()
	}
	in := &instance{dir: dir, fronts: tier1, caches: tier2}
	for i := range n {
		t1 := ""
		if twoTier {
			t1 = tier1[i]
		}
		conf, err := nginxConf(dir, i+1, t1, tier2[i], tier2, r.origin, memBytes)
		if err != nil {
			in.stop()
			return nil, err
		}
		p, err := startProc(dir, fmt.Sprintf("nginx-%d", i+1), r.nginx, "-c", conf, "-e", filepath.Join(filepath.Dir(conf), "error.log"))
		if err != nil {
			in.stop()
			return nil, err
		}
		in.all = append(in.all, p)
		in.serving = append(in.serving, p)
		front := tier2[i]
		if twoTier {
			front = tier1[i]
		}
		in.targets = append(in.targets, "http://"+front)
	}
	// Caches first: a front that probes a cache not yet listening marks it
	// failed for fail_timeout.
	for _, t := range append(slices.Clone(tier2), in.targets...) {
		if !strings.HasPrefix(t, "http://") {
			t = "http://" + t
		}
		if err := waitHTTP(ctx, t+"/", 200); err != nil {
			in.stop()
			return nil, err
		}
	}
	return in, nil
}

func startNginxTwoTier(ctx context.Context, r *runner, dir string, memBytes int64, n int) (*instance, error) {
	return startNginx(ctx, r, dir, memBytes, n, true)
}

func startNginxLocal(ctx context.Context, r *runner, dir string, memBytes int64, n int) (*instance, error) {
	return startNginx(ctx, r, dir, memBytes, n, false)
}

// varnishVCL makes each instance a tier-1 front (shard director over the
// instances' tier-2 listeners, no caching) and a tier-2 cache, like the
// nginx two-tier design.
func varnishVCL(peers []string, origin string) string {
	host, port, _ := strings.Cut(strings.TrimPrefix(origin, "http://"), ":")
	var b strings.Builder
	fmt.Fprintf(&b, "vcl 4.1;\nimport directors;\n\nbackend origin { .host = %q; .port = %q; }\n", host, port)
	for i, p := range peers {
		h, pt, _ := strings.Cut(p, ":")
		fmt.Fprintf(&b, "backend peer%d { .host = %q; .port = %q; }\n", i, h, pt)
	}
	b.WriteString("\nsub vcl_init {\n    new shard = directors.shard();\n")
	for i := range peers {
		fmt.Fprintf(&b, "    shard.add_backend(peer%d);\n", i)
	}
	b.WriteString(`    shard.reconfigure();
}

sub vcl_recv {
    # The cache key is host and URL; drop the front's port from the host,
    # as nginx's $host does, so a URL has one key whichever front gets it.
    set req.http.host = regsub(req.http.host, ":[0-9]+$", "");
    if (local.socket == "tier1") {
        set req.backend_hint = shard.backend(by=URL);
        return (pass);
    }
    set req.backend_hint = origin;
}

sub vcl_deliver {
    if (local.socket == "tier2") {
        set resp.http.X-Cache-Node = server.identity;
        if (obj.hits > 0) {
            set resp.http.X-Cache = "HIT";
        } else {
            set resp.http.X-Cache = "MISS";
        }
    }
}
`)
	return b.String()
}

func startVarnish(ctx context.Context, r *runner, dir string, memBytes int64, n int) (*instance, error) {
	in := &instance{dir: dir}
	tier1 := make([]string, n)
	tier2 := make([]string, n)
	for i := range n {
		tier1[i], tier2[i] = freePort(), freePort()
	}
	vcl := filepath.Join(dir, "shard.vcl")
	if err := os.WriteFile(vcl, []byte(varnishVCL(tier2, r.origin)), 0o644); err != nil {
		return nil, err
	}
	for i := range n {
		work := filepath.Join(dir, fmt.Sprintf("varnish-%d", i+1))
		p, err := startProc(dir, fmt.Sprintf("varnish-%d", i+1), r.varnishd, "-F", "-j", "none", "-n", work, "-i", fmt.Sprintf("varnish-%d", i+1),
			"-a", "tier1="+tier1[i], "-a", "tier2="+tier2[i], "-f", vcl,
			"-s", fmt.Sprintf("malloc,%dk", memBytes>>10), "-T", "none")
		if err != nil {
			in.stop()
			return nil, err
		}
		in.all = append(in.all, p)
		in.serving = append(in.serving, p)
		in.targets = append(in.targets, "http://"+tier1[i])
	}
	for _, t := range in.targets {
		if err := waitHTTP(ctx, t+"/", 200); err != nil {
			in.stop()
			return nil, err
		}
	}
	return in, nil
}

// startCeiling runs this binary as a plain net/http server of 4 KiB from
// memory: the most a hit can do on this machine's HTTP stack.
func startCeiling(ctx context.Context, r *runner, dir string, _ int64, _ int) (*instance, error) {
	addr := freePort()
	p, err := startProcEnv(dir, "ceiling", r.self, oneWorker, "ceiling", addr)
	if err != nil {
		return nil, err
	}
	in := &instance{targets: []string{"http://" + addr}, serving: []*proc{p}, all: []*proc{p}}
	if err := waitHTTP(ctx, in.targets[0]+"/", 200); err != nil {
		in.stop()
		return nil, err
	}
	return in, nil
}

// objectsPerNode is the mean number of objects each instance holds, read
// the way each system counts them: shardcache's disk tier and probation
// queue (an object is in one or the other; memory holds copies), nginx's
// cache files, Varnish's MAIN.n_object. -1 when it cannot be read.
func objectsPerNode(ctx context.Context, sys system, in *instance) float64 {
	switch sys.name {
	case "shardcache", syncedShardcache.name:
		s, err := scrape(in)
		if err != nil || len(in.ops) == 0 {
			return -1
		}
		// The disk tier, and the new objects on probation in memory (not on
		// disk until their second use).
		return (s.counter("shardcache_store_objects", `tier="disk"`) + s.counter("shardcache_store_objects", `tier="probation"`)) / float64(len(in.ops))
	case "nginx two-tier", "nginx local":
		var n int
		for i := range in.caches {
			filepath.WalkDir(filepath.Join(in.dir, fmt.Sprintf("nginx-%d", i+1), "cache"), func(_ string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					n++
				}
				return nil
			})
		}
		return float64(n) / float64(max(1, len(in.caches)))
	case "varnish shard":
		var sum float64
		for i := range in.serving {
			out, err := exec.CommandContext(ctx, "varnishstat", "-n", filepath.Join(in.dir, fmt.Sprintf("varnish-%d", i+1)), "-1", "-f", "MAIN.n_object").Output()
			f := strings.Fields(string(out))
			if err != nil || len(f) < 2 {
				return -1
			}
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return -1
			}
			sum += v
		}
		return sum / float64(max(1, len(in.serving)))
	}
	return -1
}
