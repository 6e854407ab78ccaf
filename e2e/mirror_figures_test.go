package e2e

import (
	"context"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// mirrorImageMiB sizes TestMirrorFigures' image: small in every run, the
// figures' 200 MiB when asked (see docs/registry.md):
//
//	go test -count=1 -run TestMirrorFigures -v ./e2e/ -args -mirror-image-mib 200
var mirrorImageMiB = flag.Int("mirror-image-mib", 8, "TestMirrorFigures: the image's size in MiB")

// TestMirrorFigures runs the mirror's scenarios at one image size and logs
// the timings (never judged: no timing threshold in a test); what it
// asserts are counts and outcomes. Three nodes pull one cold image at
// once; a warm pull goes through the node owning the fewest of its bytes
// and is compared with pulling from the registry directly; a warmed image
// is pulled through every node; the registry is killed and a cached and an
// uncached tag are pulled.
func TestMirrorFigures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m := startMirrorTTL(t, ctx, 3, "0s") // every use of a tag asks the registry
	quarter := *mirrorImageMiB << 20 / 4
	layout, blobs := ociImageLayers(t, quarter, quarter, quarter, quarter)
	pushImage(ctx, t, layout, m.regA, "big/app:v1")
	pull := func(src string) (time.Duration, error) {
		out := filepath.Join(t.TempDir(), "oci")
		start := time.Now()
		err := skopeo(ctx, "copy", "--src-tls-verify=false", "docker://"+src, "oci:"+out+":v1")
		d := time.Since(start)
		os.RemoveAll(out)
		return d, err
	}

	// 1. Three nodes pull the cold image at once.
	times := make([]time.Duration, 3)
	var wg sync.WaitGroup
	for i, nd := range m.c.nodes {
		wg.Go(func() {
			var err error
			if times[i], err = pull(nd.client + "/big/app:v1"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for d, n := range blobGets(m.proxyA, "big/app", blobs) {
		if n != 1 {
			t.Errorf("blob %s: %d upstream GETs over three concurrent cold pulls, want 1", d, n)
		}
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	t.Logf("figure cold: %d MiB through 3 nodes at once: %v %v %v; the slowest is %.2f x the fastest; each blob fetched once",
		*mirrorImageMiB, times[0].Round(time.Millisecond), times[1].Round(time.Millisecond), times[2].Round(time.Millisecond),
		float64(sorted[2])/float64(sorted[0]))

	// 2. A warm pull through the node owning the fewest of the image's
	// bytes, against the registry directly: A B A B A B, medians.
	var rj ringJSON
	if err := m.c.cachectl(ctx, &rj, "ring"); err != nil {
		t.Fatal(err)
	}
	rg := rj.ring(t)
	owned := map[string]int{}
	for _, d := range blobs[:4] {
		owned[rg.Owner("oci-blob:mirror/"+d).ID] += quarter
	}
	via := m.c.nodes[0]
	for _, nd := range m.c.nodes {
		if owned[nd.id] < owned[via.id] {
			via = nd
		}
	}
	var direct, mirrored []time.Duration
	for range 3 {
		for _, src := range []string{m.regA, via.client} {
			d, err := pull(src + "/big/app:v1")
			if err != nil {
				t.Fatal(err)
			}
			if src == m.regA {
				direct = append(direct, d)
			} else {
				mirrored = append(mirrored, d)
			}
		}
	}
	slices.Sort(direct)
	slices.Sort(mirrored)
	mib := float64(*mirrorImageMiB)
	t.Logf("figure warm: through %s (owner of %d of %d MiB) median %v = %.0f MiB/s; the registry directly median %v = %.0f MiB/s; ratio %.2f",
		via.id, owned[via.id]>>20, *mirrorImageMiB, mirrored[1].Round(time.Millisecond), mib/mirrored[1].Seconds(),
		direct[1].Round(time.Millisecond), mib/direct[1].Seconds(), direct[1].Seconds()/mirrored[1].Seconds())

	// 3. After cachectl warm, pulls through every node fetch no blob.
	layout2, _ := ociImageLayers(t, quarter, quarter)
	pushImage(ctx, t, layout2, m.regA, "warmed/app:v1")
	var sum warmSummary
	if err := m.c.cachectl(ctx, &sum, "warm", "registry-a.test/warmed/app:v1"); err != nil {
		t.Fatal(err)
	}
	warmed := len(m.proxyA.requests())
	for _, nd := range m.c.nodes {
		if _, err := pull(nd.client + "/warmed/app:v1"); err != nil {
			t.Fatal(err)
		}
	}
	blobRequests := 0
	for _, s := range m.proxyA.requests()[warmed:] {
		if strings.Contains(s.path, "/blobs/") {
			blobRequests++
		}
	}
	if blobRequests != 0 {
		t.Errorf("%d upstream blob requests over three pulls after cachectl warm, want 0", blobRequests)
	}
	t.Logf("figure warmed: cachectl warm filled %d, then 3 pulls through 3 nodes: %d upstream blob requests", sum.Filled, blobRequests)

	// 4. The registry is down: the cached tag is served stale, an
	// uncached one fails with an error naming the registry.
	oci := []string{mediaOCIManifest}
	if a := getManifest(t, "http://"+via.client, "/v2/big/app/manifests/v1", oci); a.code != 200 {
		t.Fatalf("the tag with its registry up: %+v", a)
	}
	m.procA.Kill()
	stale, err := pull(via.client + "/big/app:v1")
	if err != nil {
		t.Fatalf("pulling a cached tag with its registry down: %v", err)
	}
	req, _ := http.NewRequest("GET", "http://"+via.client+"/v2/big/app/manifests/v1", nil)
	req.Header.Set("Accept", mediaOCIManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Cache"); resp.StatusCode != 200 || got != "STALE" || !strings.Contains(resp.Header.Get("Cache-Status"), "detail=stale") {
		t.Errorf("the cached tag with its registry down: %d, X-Cache %q, Cache-Status %q; want 200, STALE and detail=stale",
			resp.StatusCode, got, resp.Header.Get("Cache-Status"))
	}
	start := time.Now()
	_, err = pull(via.client + "/big/app:never-pulled")
	failed := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("pulling an uncached tag with its registry down: %v, want a 502", err)
	}
	t.Logf("figure down: cached tag pulled (stale) in %v; uncached tag failed in %v: %s", stale.Round(time.Millisecond),
		failed.Round(time.Millisecond), lastLine(err.Error()))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
