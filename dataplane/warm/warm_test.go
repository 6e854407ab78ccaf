package warm

import (
	"errors"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
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
