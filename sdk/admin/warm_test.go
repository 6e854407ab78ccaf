package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// testRegistry is an upstream registry of the test's own, a real HTTP
// server: one image, team/app:v1 (an OCI manifest, its config and two
// layers), and a count of the GETs of each blob.
type testRegistry struct {
	url       string
	manifest  []byte
	blobs     map[string][]byte // by digest
	blobOrder []string          // config, then layers
	mu        sync.Mutex
	gets      map[string]int
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func startRegistry(t *testing.T) *testRegistry {
	r := &testRegistry{blobs: map[string][]byte{}, gets: map[string]int{}}
	config := []byte(`{"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}`)
	var layers []map[string]any
	for i := range 2 {
		b := []byte(strings.Repeat(fmt.Sprintf("layer %d ", i), 2000))
		r.blobs[digestOf(b)] = b
		r.blobOrder = append(r.blobOrder, digestOf(b))
		layers = append(layers, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digestOf(b), "size": len(b)})
	}
	r.blobs[digestOf(config)] = config
	r.blobOrder = append([]string{digestOf(config)}, r.blobOrder...)
	r.manifest, _ = json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digestOf(config), "size": len(config)},
		"layers": layers})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch p := req.URL.Path; {
		case p == "/v2/team/app/manifests/v1" || p == "/v2/team/app/manifests/"+digestOf(r.manifest):
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", digestOf(r.manifest))
			w.Write(r.manifest)
		case strings.HasPrefix(p, "/v2/team/app/blobs/") && r.blobs[strings.TrimPrefix(p, "/v2/team/app/blobs/")] != nil:
			d := strings.TrimPrefix(p, "/v2/team/app/blobs/")
			r.mu.Lock()
			r.gets[d]++
			r.mu.Unlock()
			w.Header().Set("Docker-Content-Digest", d)
			w.Write(r.blobs[d])
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *testRegistry) blobGets() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for d, n := range r.gets {
		out[d] = n
	}
	return out
}

// TestWarmThroughTheControlPlane runs AdminService.Warm on the dev cluster
// (a control plane over embedded etcd, three nodes), with a mirror policy
// in front of a registry of the test's own: the control plane has a node
// warm at its ops listener and streams every step back in order, the
// summary last; warming again finds everything cached; a caller without
// the admin token is refused and an unknown node is named.
func TestWarmThroughTheControlPlane(t *testing.T) {
	if controlPlane == "" {
		t.Fatal("no dev cluster (TestMain said why)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := startRegistry(t)
	c, err := admin.New(admin.Config{Address: controlPlane, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // after the policy's deletion below
	p, err := c.PutPolicy(ctx, &pb.CachePolicy{Name: "warm-mirror", PathPrefix: "/v2/", DefaultRegistry: "reg.test",
		Registries: []*pb.Registry{{Host: "reg.test", Url: reg.url}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := c.DeletePolicy(context.Background(), "warm-mirror"); err != nil {
			t.Errorf("deleting the mirror policy: %v", err)
		}
	})
	waitApplied(ctx, t, c, p.GetRevision())

	image := []string{"reg.test/team/app:v1"}
	var steps []string
	record := func(p *pb.WarmProgress) {
		steps = append(steps, fmt.Sprintf("%s %s %s %d/%d", p.GetKind(), p.GetDigest(), p.GetResult(), p.GetDone(), p.GetTotal()))
	}
	sum, err := c.Warm(ctx, &pb.WarmRequest{Images: image}, record)
	if err != nil {
		t.Fatal(err)
	}
	// The manifest, then each blob as it is done: three, whichever ends
	// first, counted 1/3, 2/3, 3/3 in the order they arrive.
	if len(steps) != 4 || steps[0] != "manifest "+digestOf(reg.manifest)+" filled 0/0" {
		t.Fatalf("steps %q, want the manifest filled, then 3 blobs", steps)
	}
	seen := map[string]bool{}
	for i, s := range steps[1:] {
		var d string
		var done, total int
		if _, err := fmt.Sscanf(s, "blob %s filled %d/%d", &d, &done, &total); err != nil || done != i+1 || total != 3 || reg.blobs[d] == nil || seen[d] {
			t.Fatalf("step %d %q of %q: want blob %d/3 filled, each of the image's blobs once", i+1, s, steps, i+1)
		}
		seen[d] = true
	}
	// The first active node by id did it (the summary, last, names it);
	// each blob was fetched upstream once.
	if sum.GetNode() != "node-1" || sum.GetManifests() != 1 || sum.GetBlobs() != 3 || sum.GetFilled() != 4 || sum.GetCached() != 0 || sum.GetFailed() != 0 {
		t.Fatalf("summary %v, want node-1: 1 manifest and 3 blobs filled", sum)
	}
	for _, d := range reg.blobOrder {
		if n := reg.blobGets()[d]; n != 1 {
			t.Errorf("blob %s: %d upstream GETs, want 1", d[:19], n)
		}
	}

	// Again, through the node named: everything is cached, nothing fetched.
	steps = nil
	sum, err = c.Warm(ctx, &pb.WarmRequest{Images: image, Node: "node-3"}, record)
	if err != nil {
		t.Fatal(err)
	}
	if sum.GetNode() != "node-3" || sum.GetCached() != 4 || sum.GetFilled() != 0 || len(steps) != 4 {
		t.Fatalf("second warm through node-3: %v after %q, want 4 cached", sum, steps)
	}
	for _, d := range reg.blobOrder {
		if n := reg.blobGets()[d]; n != 1 {
			t.Errorf("blob %s: %d upstream GETs after the second warm, want 1", d[:19], n)
		}
	}

	wrong, err := admin.New(admin.Config{Address: controlPlane, Token: "not-the-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.Warm(ctx, &pb.WarmRequest{Images: image}, record); !errors.Is(err, admin.ErrUnauthenticated) || status.Code(err) != codes.Unauthenticated {
		t.Errorf("a warm with a wrong token: %v, want Unauthenticated", err)
	}
	if _, err := c.Warm(ctx, &pb.WarmRequest{Images: image, Node: "node-9"}, record); !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), `"node-9"`) {
		t.Errorf("a warm through an unknown node: %v, want ErrNotFound naming node-9", err)
	}
}

// waitApplied waits until every node runs policy revision rev.
func waitApplied(ctx context.Context, t *testing.T, c *admin.Client, rev int64) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.PolicyStatus(ctx)
		behind := 0
		for _, n := range st.GetNodes() {
			if n.GetAppliedRevision() < rev {
				behind++
			}
		}
		if err == nil && behind == 0 && len(st.GetNodes()) == 3 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("policy revision %d not applied by every node: %v %v", rev, st, err)
		case <-tick.C:
		}
	}
}
