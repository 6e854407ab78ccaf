package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/opsclient"
	"github.com/shardcache/shardcache/sdk/policy"
)

func TestParseImage(t *testing.T) {
	p, err := policy.Compile(&pb.CachePolicy{Name: "m", PathPrefix: "/v2/", DefaultRegistry: "docker.io", Registries: []*pb.Registry{
		{Host: "docker.io", Url: "https://registry-1.docker.io"}, {Host: "ghcr.io", Url: "https://ghcr.io"}, {Host: "reg.local:5000", Url: "http://r:5000"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, host, name, reference string }{
		{"alpine", "docker.io", "library/alpine", "latest"},
		{"alpine:3.20", "docker.io", "library/alpine", "3.20"},
		{"docker.io/bitnami/redis:7", "docker.io", "bitnami/redis", "7"},
		{"ghcr.io/org/app@sha256:abc", "ghcr.io", "org/app", "sha256:abc"},
		{"ghcr.io/org/app:v1@sha256:abc", "ghcr.io", "org/app", "sha256:abc"},
		{"reg.local:5000/team/app", "reg.local:5000", "team/app", "latest"},
	} {
		img, err := parseImage(tc.ref, p)
		if err != nil || img.host != tc.host || img.name != tc.name || img.reference != tc.reference {
			t.Errorf("%s: %+v %v, want %s %s %s", tc.ref, img, err, tc.host, tc.name, tc.reference)
		}
	}
	for _, bad := range []string{"quay.io/x/y", "localhost/x"} {
		if _, err := parseImage(bad, p); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestPlatforms(t *testing.T) {
	d := descriptor{Platform: &struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant"`
	}{"linux", "arm64", "v8"}}
	for _, tc := range []struct {
		spec string
		want bool
	}{{"", false}, {"linux/arm64", true}, {"linux/arm64/v8", true}, {"linux/arm64/v7", false}, {"all", true}} {
		ps, err := parsePlatform(tc.spec)
		if err != nil || ps.matches(d) != tc.want {
			t.Errorf("%q: %v %v, want %v", tc.spec, ps.matches(d), err, tc.want)
		}
	}
	for _, bad := range []string{"linux", "/arm64", "a/b/c/d"} {
		if _, err := parsePlatform(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestManifestBound: an index listing more platform manifests than
// maxManifests fails its image without fetching past the bound; one at the
// bound is warmed whole. What a warm streams stays within what the ops
// clients read (opsclient.MaxWarmSteps).
func TestManifestBound(t *testing.T) {
	if steps := MaxImages*(1+maxManifests+maxBlobs) + 1; steps > opsclient.MaxWarmSteps {
		t.Fatalf("a warm may send %d progress lines; the ops clients read %d", steps, opsclient.MaxWarmSteps)
	}
	for _, n := range []int{maxManifests, maxManifests + 1} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var fetched atomic.Int32
			var index []map[string]any
			for i := range n {
				index = append(index, map[string]any{"mediaType": "application/vnd.oci.image.manifest.v1+json",
					"digest": fmt.Sprintf("sha256:%064x", i), "platform": map[string]string{"os": "linux", "architecture": "amd64"}})
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v2/team/app/manifests/v1" {
					w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
					json.NewEncoder(w).Encode(map[string]any{"schemaVersion": 2, "manifests": index})
					return
				}
				fetched.Add(1)
				w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
				io.WriteString(w, `{"schemaVersion": 2, "layers": []}`)
			}))
			defer srv.Close()
			set, err := policy.Empty.Apply(&pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{{Name: "m", PathPrefix: "/v2/",
				DefaultRegistry: "reg.test", Registries: []*pb.Registry{{Host: "reg.test", Url: "http://reg.test"}}}}})
			if err != nil {
				t.Fatal(err)
			}
			var policies atomic.Pointer[policy.Set]
			policies.Store(set)
			var lines int
			sum, err := New(Config{Node: "n1", Base: srv.URL, Policies: &policies}).Warm(context.Background(),
				&pb.WarmRequest{Images: []string{"team/app:v1"}}, func(*pb.WarmProgress) { lines++ })
			if err != nil {
				t.Fatal(err)
			}
			wantFailed, wantLines := uint32(0), 1+n
			if n > maxManifests {
				wantFailed, wantLines = 1, 1+maxManifests+1
			}
			if got := int(fetched.Load()); got != min(n, maxManifests) || sum.GetFailed() != wantFailed || lines != wantLines {
				t.Fatalf("%d manifests listed: %d fetched, %d lines, summary %v; want %d fetched, %d lines, %d failed",
					n, got, lines, sum, min(n, maxManifests), wantLines, wantFailed)
			}
		})
	}
}
