package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// pushIndex puts an OCI index at name:v1 on a registry, listing name's
// tags amd64 and arm64 (pushed before) as those platforms' manifests.
func pushIndex(t *testing.T, registry, name string) {
	t.Helper()
	var manifests []any
	for _, arch := range []string{"amd64", "arm64"} {
		a := getManifest(t, "http://"+registry, "/v2/"+name+"/manifests/"+arch, []string{mediaOCIManifest})
		req, _ := http.NewRequest("GET", "http://"+registry+"/v2/"+name+"/manifests/"+arch, nil)
		req.Header.Set("Accept", mediaOCIManifest)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		manifests = append(manifests, map[string]any{"mediaType": mediaOCIManifest, "digest": a.digest, "size": resp.ContentLength,
			"platform": map[string]string{"os": "linux", "architecture": arch}})
	}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaOCIIndex, "manifests": manifests})
	req, _ := http.NewRequest("PUT", "http://"+registry+"/v2/"+name+"/manifests/v1", bytes.NewReader(index))
	req.Header.Set("Content-Type", mediaOCIIndex)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("putting the index: %d", resp.StatusCode)
	}
	sum := sha256.Sum256(index)
	t.Logf("index %s:v1 sha256:%s", name, hex.EncodeToString(sum[:]))
}

type warmSummary struct {
	Images, Manifests, Blobs, Filled, Cached, Failed int
	Node                                             string
}

func TestWarmFillsEveryBlobAtItsOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := startMirror(t, ctx, 3)
	amd, blobsAMD := ociImage(t, 512<<10)
	arm, blobsARM := ociImage(t, 512<<10)
	pushImage(ctx, t, amd, m.regB, "multi/app:amd64")
	pushImage(ctx, t, arm, m.regB, "multi/app:arm64")
	pushIndex(t, m.regB, "multi/app")
	before := len(m.proxyB.requests())

	var sum warmSummary
	if err := m.c.cachectl(ctx, &sum, "warm", "--platform", "linux/arm64", "registry-b.test/multi/app:v1"); err != nil {
		t.Fatal(err)
	}
	// The index and the arm64 manifest; the arm64 image's config and layer.
	if sum.Images != 1 || sum.Manifests != 2 || sum.Blobs != 2 || sum.Filled != 4 || sum.Cached != 0 || sum.Failed != 0 {
		t.Fatalf("first warm: %+v, want 2 manifests and 2 blobs filled", sum)
	}
	for _, d := range blobsARM {
		if n := m.proxyB.count(before, http.MethodGet, "/v2/multi/app/blobs/"+d); n != 1 {
			t.Errorf("arm64 blob %s: %d upstream GETs by the warm, want 1", d[:19], n)
		}
	}
	for _, d := range blobsAMD {
		if n := m.proxyB.count(before, http.MethodGet, "/v2/multi/app/blobs/"+d); n != 0 {
			t.Errorf("amd64 blob %s fetched by a warm of linux/arm64", d[:19])
		}
	}
	// Idempotent: a second warm finds everything cached.
	if err := m.c.cachectl(ctx, &sum, "warm", "--platform", "linux/arm64", "registry-b.test/multi/app:v1"); err != nil {
		t.Fatal(err)
	}
	if sum.Filled != 0 || sum.Cached != 4 || sum.Failed != 0 {
		t.Fatalf("second warm: %+v, want all 4 cached", sum)
	}
	// Three pulls through the three nodes ask the upstream for no blob.
	warmed := len(m.proxyB.requests())
	for _, nd := range m.c.nodes {
		out := t.TempDir()
		err := skopeo(ctx, "--override-os", "linux", "--override-arch", "arm64", "copy", "--src-tls-verify=false",
			"docker://"+nd.client+"/registry-b.test/multi/app:v1", "oci:"+out+":v1")
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range m.proxyB.requests()[warmed:] {
		if s.method == http.MethodGet && bytes.Contains([]byte(s.path), []byte("/blobs/")) {
			t.Errorf("a pull after the warm fetched %s upstream", s.path)
		}
	}
	// A reference the mirror cannot serve is refused, naming it.
	err := m.c.cachectl(ctx, &sum, "warm", "quay.io/x/y:v1")
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(`registry "quay.io" is not one the mirror serves`)) {
		t.Fatalf("warming an unlisted registry: %v", err)
	}
}
