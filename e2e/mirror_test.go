package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The mirror test: one node address in front of two upstream registries
// (two docker-registry processes, each behind a counting proxy), one of
// them behind a Bearer token realm the test runs, pulled by the real
// clients: containerd (a hosts.toml _default mirror, so it sends ns=) and
// skopeo (the /v2/<host>/<name>/ form, or the default registry).

// tokenRealm is a small Bearer realm of the distribution token spec: Basic
// bot:secret gets a token for the scope asked.
type tokenRealm struct {
	mu      sync.Mutex
	issued  map[string]bool
	fetches atomic.Int64
}

func (tr *tokenRealm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tr.fetches.Add(1)
	if user, pass, ok := r.BasicAuth(); !ok || user != "bot" || pass != "secret" {
		http.Error(w, "bad credentials", http.StatusUnauthorized)
		return
	}
	b := make([]byte, 16)
	rand.Read(b)
	tok := hex.EncodeToString(b)
	tr.mu.Lock()
	tr.issued[tok] = true
	tr.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_in": 300})
}

func (tr *tokenRealm) valid(tok string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.issued[tok]
}

// bearerGate lets through only requests with a token of realm, and
// answers the others with the realm's challenge, as Docker Hub does.
type bearerGate struct {
	realm    *tokenRealm
	realmURL string
	next     http.Handler
	refused  atomic.Int64 // requests with a token the realm never issued
}

func (g *bearerGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && g.realm.valid(tok) {
		g.next.ServeHTTP(w, r)
		return
	}
	if r.Header.Get("Authorization") != "" {
		g.refused.Add(1)
	}
	name := strings.TrimPrefix(r.URL.Path, "/v2/")
	for _, seg := range []string{"/manifests/", "/blobs/", "/tags/", "/referrers/"} {
		if i := strings.Index(name, seg); i >= 0 {
			name = name[:i]
		}
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q,service="registry-b",scope="repository:%s:pull"`, g.realmURL+"/token", name))
	w.WriteHeader(http.StatusUnauthorized)
}

// pushImage copies an OCI layout's v1 to ref on a registry directly.
func pushImage(ctx context.Context, t *testing.T, layout, registry, name string) {
	t.Helper()
	if err := skopeo(ctx, "copy", "--dest-tls-verify=false", "oci:"+layout+":v1", "docker://"+registry+"/"+name); err != nil {
		t.Fatal(err)
	}
}

// manifestDigest is the digest a registry gives name's v1 as an OCI manifest.
func manifestDigest(t *testing.T, registry, name string) string {
	t.Helper()
	a := getManifest(t, "http://"+registry, "/v2/"+name+"/manifests/v1", []string{mediaOCIManifest})
	if a.code != 200 || a.digest == "" {
		t.Fatalf("%s/%s:v1 on the registry: %+v", registry, name, a)
	}
	return a.digest
}

// containerd is a containerd daemon of the test's own, and ctr driving it.
type containerd struct {
	sock, hostsDir string
}

// startContainerd starts Debian's containerd with its state in a
// temporary directory and a hosts.toml _default mirror at mirror.
func startContainerd(t *testing.T, ctx context.Context, mirror string) *containerd {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Fatalf("containerd: %v (e2e/install-deps.sh installs it)", err)
	}
	dir, err := os.MkdirTemp("", "ctd-") // a short path: the socket's is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &containerd{sock: filepath.Join(dir, "c.sock"), hostsDir: filepath.Join(dir, "hosts")}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.overlayfs"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+mirror)
	if err := os.MkdirAll(filepath.Join(c.hostsDir, "_default"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.hostsDir, "_default", "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "containerd", "containerd", "--config", filepath.Join(dir, "config.toml"))
	if err := p.WaitLine(ctx, "containerd successfully booted"); err != nil {
		t.Fatal(err)
	}
	return c
}

// pull pulls ref through the mirror with ctr, unpacked, and returns the
// image's digest as containerd records it.
func (c *containerd) pull(ctx context.Context, ref string) (string, error) {
	ctr := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.sock, "--namespace", "e2e"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	if _, err := ctr("images", "pull", "--hosts-dir", c.hostsDir, "--snapshotter", "native", ref); err != nil {
		return "", err
	}
	out, err := ctr("images", "ls")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == ref {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("ctr images ls lists no %s:\n%s", ref, out)
}

// pullSkopeo pulls ref (through a node) into an OCI layout and reports
// whether it holds each of blobs.
func pullSkopeo(ctx context.Context, t *testing.T, ref string, blobs []string) {
	t.Helper()
	out := t.TempDir()
	if err := skopeo(ctx, "copy", "--src-tls-verify=false", "docker://"+ref, "oci:"+out+":v1"); err != nil {
		t.Fatal(err)
	}
	for _, d := range blobs {
		if _, err := os.Stat(filepath.Join(out, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))); err != nil {
			t.Fatalf("the pull of %s lacks blob %s: another upstream's image?", ref, d)
		}
	}
}

type mirrorFixture struct {
	c              *cluster
	regA, regB     string // the registries' own addresses
	procA          *process
	proxyA, proxyB *registryProxy
	realm          *tokenRealm
	gate           *bearerGate
}

// startMirror starts two registries (B behind the realm), a cluster of
// nodes nodes, and applies a mirror policy of both with a tag TTL of 1m.
func startMirror(t *testing.T, ctx context.Context, nodes int) *mirrorFixture {
	t.Helper()
	return startMirrorTTL(t, ctx, nodes, "1m")
}

// startMirrorTTL is startMirror with the tag TTL tagTTL.
func startMirrorTTL(t *testing.T, ctx context.Context, nodes int, tagTTL string) *mirrorFixture {
	t.Helper()
	m := &mirrorFixture{realm: &tokenRealm{issued: map[string]bool{}}}
	m.regA, m.procA = startRegistryProcess(t, ctx)
	m.regB = startRegistry(t, ctx)
	proxy := func(addr string) *registryProxy {
		u, _ := url.Parse("http://" + addr)
		return &registryProxy{proxy: httputil.NewSingleHostReverseProxy(u)}
	}
	m.proxyA, m.proxyB = proxy(m.regA), proxy(m.regB)
	realmSrv := httpServer(t, m.realm)
	m.gate = &bearerGate{realm: m.realm, realmURL: realmSrv, next: m.proxyB}
	urlA, urlB := httpServer(t, m.proxyA), httpServer(t, m.gate)
	origin := &countingOrigin{counts: map[string]int{}}
	m.c = startClusterWith(t, ctx, clusterConfig{nodes: nodes, origin: origin, nodeArgs: func(int) []string { return []string{"--hot-threshold", "-1"} }})
	m.c.origin = origin
	dir := t.TempDir()
	creds := filepath.Join(dir, "registry-b.json")
	if err := os.WriteFile(creds, []byte(`{"username": "bot", "password": "secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The shape: registries by host, credentials from a file, a
	// default for requests that name none.
	policy := fmt.Sprintf(`- name: mirror
  path_prefix: /v2/
  registries:
    - host: registry-a.test
      url: %s
    - host: registry-b.test
      url: %s
      credentials_file: %s
  default_registry: registry-a.test
  tag_ttl: %s
`, urlA, urlB, creds, tagTTL)
	file := filepath.Join(dir, "mirror.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.c.cachectlText(ctx, "policy", "apply", "-f", file); err != nil {
		t.Fatal(err)
	}
	for _, nd := range m.c.nodes {
		// The policy first: a probe of /v2/ that a node answered with no
		// policy yet would go to the default origin, which the tests
		// check a mirror never sends anything to.
		if err := eventually(ctx, func() error {
			if v := metric(t, nd, "shardcache_policy_revision"); v == 0 {
				return fmt.Errorf("%s has no policy yet", nd.id)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// Only a mirror answers /v2/ itself, with the API's header.
		err := eventually(ctx, func() error {
			resp, err := http.Get("http://" + nd.client + "/v2/")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.Header.Get("Docker-Distribution-Api-Version") == "" {
				return fmt.Errorf("%s: /v2/ is not the mirror's yet", nd.id)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// httpServer serves h on a free loopback port until the test ends and
// returns its base URL.
func httpServer(t *testing.T, h http.Handler) string {
	t.Helper()
	addr := freeAddr(t)
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + addr
}

// blobGets counts the GETs proxy saw for each of blobs of name.
func blobGets(p *registryProxy, name string, blobs []string) map[string]int {
	n := map[string]int{}
	for _, d := range blobs {
		n[d[:19]] = p.count(0, http.MethodGet, "/v2/"+name+"/blobs/"+d)
	}
	return n
}

func TestMirrorOfTwoRegistriesWithRealClients(t *testing.T) {
	for _, tool := range []string{"skopeo", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (e2e/install-deps.sh installs it)", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	m := startMirror(t, ctx, 3)
	// One name on both registries, with different content; one name on B only.
	layoutA, blobsA := ociImage(t, 1<<20)
	layoutB, blobsB := ociImage(t, 1<<20)
	layoutOnly, blobsOnly := ociImage(t, 64<<10)
	pushImage(ctx, t, layoutA, m.regA, "test/app:v1")
	pushImage(ctx, t, layoutB, m.regB, "test/app:v1")
	pushImage(ctx, t, layoutOnly, m.regB, "only-b/app:v1")
	digestA, digestB := manifestDigest(t, m.regA, "test/app"), manifestDigest(t, m.regB, "test/app")
	ctd := startContainerd(t, ctx, m.c.nodes[0].client)

	// containerd names the registry by ns=: each pull gets its own
	// upstream's image, the one behind the realm too.
	for _, tc := range []struct{ ref, want string }{
		{"registry-a.test/test/app:v1", digestA},
		{"registry-b.test/test/app:v1", digestB},
	} {
		got, err := ctd.pull(ctx, tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Fatalf("containerd pulled %s as %s; its registry has %s", tc.ref, got, tc.want)
		}
	}
	if _, err := ctd.pull(ctx, "registry-b.test/only-b/app:v1"); err != nil {
		t.Fatalf("a name only registry B has: %v", err)
	}
	// skopeo sends no ns: the path names the registry, or the default
	// serves. Through other nodes, after containerd: no blob is fetched
	// again.
	pullSkopeo(ctx, t, m.c.nodes[1].client+"/registry-b.test/test/app:v1", blobsB)
	pullSkopeo(ctx, t, m.c.nodes[2].client+"/test/app:v1", blobsA)
	pullSkopeo(ctx, t, m.c.nodes[2].client+"/registry-a.test/test/app:v1", blobsA)
	pullSkopeo(ctx, t, m.c.nodes[1].client+"/registry-b.test/only-b/app:v1", blobsOnly)
	for name, counts := range map[string]map[string]int{
		"A test/app":   blobGets(m.proxyA, "test/app", blobsA),
		"B test/app":   blobGets(m.proxyB, "test/app", blobsB),
		"B only-b/app": blobGets(m.proxyB, "only-b/app", blobsOnly),
	} {
		for d, n := range counts {
			if n != 1 {
				t.Errorf("%s blob %s: %d upstream GETs over a containerd and a skopeo pull through different nodes, want 1", name, d, n)
			}
		}
	}
	// B's registry saw only the realm's tokens, never a client's; A's
	// saw no Authorization at all.
	if n := m.gate.refused.Load(); n != 0 {
		t.Errorf("registry B got %d requests with a token its realm never issued (a client's forwarded?)", n)
	}
	if n := m.realm.fetches.Load(); n == 0 || n > 9 {
		t.Errorf("%d token fetches for 2 scopes over 3 nodes, want 1 to 6 (one per scope and owner)", n)
	}
	if n := m.c.origin.total.Load(); n != 0 {
		t.Errorf("the node's default origin got %d requests: a mirror sends nothing there", n)
	}

	// Concurrent cold pulls of one image through every node: each blob
	// has one owner cluster-wide (its key is its digest), which fetches
	// it once and streams it to every waiter.
	layoutC, blobsC := ociImage(t, 4<<20)
	pushImage(ctx, t, layoutC, m.regB, "cold/app:v1")
	var wg sync.WaitGroup
	errs := make([]error, len(m.c.nodes))
	for i, nd := range m.c.nodes {
		wg.Go(func() {
			errs[i] = skopeo(ctx, "copy", "--src-tls-verify=false", "docker://"+nd.client+"/registry-b.test/cold/app:v1", "oci:"+t.TempDir()+":v1")
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent pull through %s: %v", m.c.nodes[i].id, err)
		}
	}
	for d, n := range blobGets(m.proxyB, "cold/app", blobsC) {
		if n != 1 {
			t.Errorf("blob %s: %d upstream GETs over 3 concurrent cold pulls through 3 nodes, want 1", d, n)
		}
	}
}

func TestMirrorRefusesBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := startMirror(t, ctx, 1)
	base := "http://" + m.c.nodes[0].client
	before := len(m.proxyA.requests()) + len(m.proxyB.requests())
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v2/test/app/manifests/v1?ns=evil.example", 404, "NAME_UNKNOWN"},
		{"GET", "/v2/evil.example/test/app/manifests/v1", 404, "NAME_UNKNOWN"},
		{"GET", "/v2/test%2Fapp/manifests/v1", 400, "NAME_INVALID"},
		{"GET", "/v2/test/App/manifests/v1", 400, "NAME_INVALID"},
		{"GET", "/v2/test/a..b/manifests/v1", 400, "NAME_INVALID"},
		{"GET", "/v2/../../etc/manifests/v1", 400, ""}, // climbs above the root: refused on arrival
		{"GET", "/v2/test/app/blobs/sha256:xyz", 400, "DIGEST_INVALID"},
		{"PUT", "/v2/test/app/manifests/v1", 405, "UNSUPPORTED"},
		{"POST", "/v2/test/app/blobs/uploads/", 405, "UNSUPPORTED"},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var oci struct {
			Errors []struct{ Code, Message string } `json:"errors"`
		}
		json.Unmarshal(body, &oci)
		if tc.code == "" {
			if resp.StatusCode != tc.status {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, body, tc.status)
			}
			continue
		}
		if resp.StatusCode != tc.status || len(oci.Errors) != 1 || oci.Errors[0].Code != tc.code || oci.Errors[0].Message == "" {
			t.Errorf("%s %s: %d %s, want %d with an OCI error %s", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.code)
		}
	}
	if after := len(m.proxyA.requests()) + len(m.proxyB.requests()); after != before {
		t.Errorf("refused requests reached the registries: %d requests", after-before)
	}
	// Nothing else is affected: a good pull through the same node works.
	layout, blobs := ociImage(t, 64<<10)
	pushImage(ctx, t, layout, m.regA, "test/app:v1")
	pullSkopeo(ctx, t, m.c.nodes[0].client+"/test/app:v1", blobs)
	if n := m.c.origin.total.Load(); n != 0 {
		t.Errorf("refused requests reached the node's default origin: %d", n)
	}
}
