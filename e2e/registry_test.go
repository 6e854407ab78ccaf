package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The container registry test: Debian's docker-registry (distribution
// 2.8) is the origin of a cluster, reached through a counting proxy in
// the test, and skopeo is the client. An image is pushed through a node,
// pulled through the others, and its manifest asked for with several
// Accept values, each answer compared with the registry's own.

const (
	mediaOCIManifest   = "application/vnd.oci.image.manifest.v1+json"
	mediaOCIIndex      = "application/vnd.oci.image.index.v1+json"
	mediaDockerV2      = "application/vnd.docker.distribution.manifest.v2+json"
	mediaDockerList    = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaDockerV1Signd = "application/vnd.docker.distribution.manifest.v1+prettyjws"
)

// registryProxy passes every request to the registry and records it.
type registryProxy struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	seen  []seenRequest
}

type seenRequest struct{ method, path, via string }

func (p *registryProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, seenRequest{r.Method, r.URL.Path, r.Header.Get("Via")})
	p.mu.Unlock()
	p.proxy.ServeHTTP(w, r)
}

func (p *registryProxy) requests() []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenRequest(nil), p.seen...)
}

// count is how many requests with method for path the registry saw,
// from its from-th request on.
func (p *registryProxy) count(from int, method, path string) int {
	n := 0
	for _, s := range p.requests()[from:] {
		if s.method == method && s.path == path {
			n++
		}
	}
	return n
}

// startRegistry starts docker-registry on a free loopback port with its
// storage in a temporary directory, and waits until it answers /v2/.
func startRegistry(t *testing.T, ctx context.Context) string {
	t.Helper()
	addr, _ := startRegistryProcess(t, ctx)
	return addr
}

// startRegistryProcess is startRegistry, with the process to kill.
func startRegistryProcess(t *testing.T, ctx context.Context) (string, *process) {
	t.Helper()
	bin := "/usr/bin/docker-registry"
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (e2e/install-deps.sh installs Debian's docker-registry)", bin, err)
	}
	addr := freeAddr(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yml")
	doc := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(config, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := startProcess(t, "registry", bin, "serve", config)
	err := eventually(ctx, func() error {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("registry /v2/: %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return addr, proc
}

// ociImage writes an OCI image layout with one tag, v1: a layer of size
// random bytes and its config. It returns the layout's directory and the
// digests of its blobs.
func ociImage(t *testing.T, size int) (string, []string) {
	t.Helper()
	return ociImageLayers(t, size)
}

// ociImageLayers is ociImage with a layer of each of sizes; the digests
// are the layers' then the config's.
func ociImageLayers(t *testing.T, sizes ...int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(blobs, h), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + h, len(b)
	}
	var layers []any
	var diffIDs, digests []string
	for _, size := range sizes {
		var layer bytes.Buffer
		content := make([]byte, size)
		rand.Read(content)
		tw := tar.NewWriter(&layer)
		tw.WriteHeader(&tar.Header{Name: "data.bin", Mode: 0o644, Size: int64(size), ModTime: time.Unix(0, 0)})
		tw.Write(content)
		tw.Close()
		diffSum := sha256.Sum256(layer.Bytes())
		diffIDs = append(diffIDs, "sha256:"+hex.EncodeToString(diffSum[:]))
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed) // random bytes do not compress
		zw.Write(layer.Bytes())
		zw.Close()
		layerDigest, layerSize := put(gz.Bytes())
		digests = append(digests, layerDigest)
		layers = append(layers, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layerDigest, "size": layerSize})
	}
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	configDigest, configSize := put(config)
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaOCIManifest,
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": configDigest, "size": configSize},
		"layers": layers})
	manifestDigest, manifestSize := put(manifest)
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{"mediaType": mediaOCIManifest,
		"digest": manifestDigest, "size": manifestSize, "annotations": map[string]string{"org.opencontainers.image.ref.name": "v1"}}}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, append(digests, configDigest)
}

// skopeo runs the real skopeo.
func skopeo(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "skopeo", append([]string{"--insecure-policy"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+os.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// manifestAnswer is what a manifest request got that a client relies on.
type manifestAnswer struct {
	code          int
	ctype, digest string
}

func getManifest(t *testing.T, base, path string, accept []string) manifestAnswer {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	for _, a := range accept {
		req.Header.Add("Accept", a)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a := manifestAnswer{code: resp.StatusCode, digest: resp.Header.Get("Docker-Content-Digest")}
	if a.code == 200 {
		a.ctype = resp.Header.Get("Content-Type")
	}
	return a
}

func TestContainerRegistryThroughTheCluster(t *testing.T) {
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Fatalf("skopeo: %v (e2e/install-deps.sh installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	registry := startRegistry(t, ctx)
	target, _ := url.Parse("http://" + registry)
	rp := &registryProxy{proxy: httputil.NewSingleHostReverseProxy(target)}
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: rp, nodeArgs: func(int) []string { return []string{"--hot-threshold", "-1"} }})

	// A push through node-1: every request of it reaches the registry
	// through a node (the registry's upload Location never sends the
	// client around the cluster).
	layout, blobs := ociImage(t, 3<<20)
	if err := skopeo(ctx, "copy", "--dest-tls-verify=false", "oci:"+layout+":v1", "docker://"+c.nodes[0].client+"/e2e/app:v1"); err != nil {
		t.Fatal(err)
	}
	pushed := rp.requests()
	uploads := 0
	for _, s := range pushed {
		if s.via == "" {
			t.Errorf("the registry got %s %s from the client directly, not through a node", s.method, s.path)
		}
		if s.method == http.MethodPatch || s.method == http.MethodPut {
			uploads++
		}
	}
	if uploads == 0 {
		t.Fatalf("no upload reached the registry through the nodes: %v", pushed)
	}

	// Cold pulls through the other nodes: each blob is fetched from the
	// registry once; skopeo checks every digest.
	for i, nd := range c.nodes[1:] {
		out := t.TempDir()
		if err := skopeo(ctx, "copy", "--src-tls-verify=false", "docker://"+nd.client+"/e2e/app:v1", "oci:"+out+":v1"); err != nil {
			t.Fatalf("pull %d through %s: %v", i+1, nd.id, err)
		}
		for _, d := range blobs {
			if _, err := os.Stat(filepath.Join(out, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))); err != nil {
				t.Fatalf("pull through %s lacks blob %s", nd.id, d)
			}
		}
	}
	for _, d := range blobs {
		if n := rp.count(len(pushed), http.MethodGet, "/v2/e2e/app/blobs/"+d); n != 1 {
			t.Errorf("blob %s: %d registry GETs over two pulls, want 1", d[:19], n)
		}
	}

	// Every manifest answer through a node is the registry's own for the
	// same Accept, whatever was asked before and through which node.
	accepts := [][]string{
		{mediaOCIManifest},
		{mediaDockerV2},
		{mediaOCIIndex},
		{mediaDockerList, mediaDockerV2},
		{mediaOCIIndex, mediaOCIManifest, mediaDockerList, mediaDockerV2},
		{mediaDockerV2, mediaOCIManifest}, // two lines
		{mediaDockerV1Signd},
		{mediaOCIManifest + ", " + mediaDockerV2},
	}
	for round := range 2 {
		for i, accept := range accepts {
			want := getManifest(t, "http://"+registry, "/v2/e2e/app/manifests/v1", accept)
			nd := c.nodes[(i+round)%3]
			got := getManifest(t, "http://"+nd.client, "/v2/e2e/app/manifests/v1", accept)
			if got != want {
				t.Errorf("round %d, Accept %q through %s: %+v; the registry answers %+v", round+1, accept, nd.id, got, want)
			}
		}
	}
}
