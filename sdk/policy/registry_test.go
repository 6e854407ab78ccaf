package policy

import (
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestRegistriesCompileAndRefuse(t *testing.T) {
	hub := &pb.Registry{Host: "docker.io", Url: "https://registry-1.docker.io/"}
	ok := &pb.CachePolicy{Name: "m", PathPrefix: "/v2/", Registries: []*pb.Registry{hub, {Host: "ghcr.io", Url: "https://ghcr.io"}}, DefaultRegistry: "docker.io"}
	c, err := Compile(ok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Registry("DOCKER.IO") != c.DefaultRegistry || c.DefaultRegistry.URL.String() != "https://registry-1.docker.io" || c.Registry("quay.io") != nil {
		t.Fatalf("compiled %+v", c)
	}
	for _, tc := range []struct {
		p    *pb.CachePolicy
		want string
	}{
		{&pb.CachePolicy{Name: "m", DefaultRegistry: "docker.io"}, "names no registry"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, DefaultRegistry: "ghcr.io"}, "not one of the registries"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub, hub}}, "listed twice"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{{Host: "Docker.IO", Url: "https://x"}}}, "lower-case host"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{{Host: "a.io:port", Url: "https://x"}}}, "lower-case host"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{{Host: "a.io", Url: "ftp://x"}}}, "base URL"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{{Host: "a.io", Url: "https://x", CredentialsFile: "creds.json"}}}, "absolute path"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{{Host: "a.io", Url: "https://x", Bandwidth: -1}}}, "bandwidth"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, OriginUrls: []string{"http://o"}}, "origin_urls"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, SliceSize: MinSliceSize}, "slice_size"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, AuthorizeEveryRequest: true}, "authorize_every_request"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, PartialContent: true}, "partial_content"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, RegistryAware: new(bool)}, "registry_aware"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, Mode: pb.CacheMode_CACHE_MODE_BYPASS}, "a mirror serves through its cache"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, PathPrefix: "/static/"}, "path_prefix"},
		{&pb.CachePolicy{Name: "m", Registries: []*pb.Registry{hub}, PullTokenFile: "token"}, "absolute path"},
		{&pb.CachePolicy{Name: "m", PullTokenFile: "/token"}, "apply to a mirror"},
		{&pb.CachePolicy{Name: "m", Registries: make([]*pb.Registry, MaxRegistries+1)}, "at most 64"},
	} {
		_, err := Compile(tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%v): %v, want an error saying %q", tc.p, err, tc.want)
		}
	}
}

// The control plane refuses by Check: each bad registry field is named
// by its path.
func TestRegistriesCheckNamesTheField(t *testing.T) {
	v := Check(&pb.CachePolicy{Name: "m", PathPrefix: "/v2/", DefaultRegistry: "quay.io", Registries: []*pb.Registry{
		{Host: "a.io", Url: "ftp://x"}, {Host: "b.io", Url: "https://b", Bandwidth: -1}, {Host: "a.io", Url: "https://a"}}})
	var fields []string
	for _, f := range v {
		fields = append(fields, f.Field)
	}
	want := []string{"registries[0].url", "registries[1].bandwidth", "registries[2].host", "default_registry"}
	if strings.Join(fields, " ") != strings.Join(want, " ") {
		t.Fatalf("Check names %v, want %v", v, want)
	}
}
