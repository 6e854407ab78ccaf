package registry

import (
	"errors"
	"net/http/httptest"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

func mirror(t *testing.T, def string) *policy.Policy {
	t.Helper()
	p, err := policy.Compile(&pb.CachePolicy{Name: "m", PathPrefix: "/v2/", DefaultRegistry: def, Registries: []*pb.Registry{
		{Host: "docker.io", Url: "https://registry-1.docker.io"}, {Host: "ghcr.io", Url: "https://ghcr.io"}, {Host: "reg.local:5000", Url: "http://10.0.0.1:5000"}}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const dg = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseRoutesByNsPathOrDefault(t *testing.T) {
	p := mirror(t, "docker.io")
	for _, tc := range []struct {
		url, host, name, key string
		kind                 Kind
	}{
		{"/v2/library/alpine/manifests/3.20?ns=docker.io", "docker.io", "library/alpine", "oci-tag:m/docker.io/library/alpine:3.20", KindManifest},
		{"/v2/library/alpine/manifests/3.20?ns=ghcr.io", "ghcr.io", "library/alpine", "oci-tag:m/ghcr.io/library/alpine:3.20", KindManifest},
		{"/v2/library/alpine/manifests/3.20?ns=reg.local%3A5000", "reg.local:5000", "library/alpine", "oci-tag:m/reg.local:5000/library/alpine:3.20", KindManifest},
		{"/v2/ghcr.io/org/app/manifests/v1", "ghcr.io", "org/app", "oci-tag:m/ghcr.io/org/app:v1", KindManifest},
		{"/v2/library/alpine/manifests/3.20", "docker.io", "library/alpine", "oci-tag:m/docker.io/library/alpine:3.20", KindManifest},
		// Content by digest: one key whatever the upstream, name or query.
		{"/v2/library/alpine/blobs/" + dg + "?ns=docker.io", "docker.io", "library/alpine", "oci-blob:m/" + dg, KindBlob},
		{"/v2/ghcr.io/x/y/blobs/" + dg, "ghcr.io", "x/y", "oci-blob:m/" + dg, KindBlob},
		{"/v2/a/blobs/" + dg + "?x=1", "docker.io", "a", "oci-blob:m/" + dg, KindBlob},
		{"/v2/a/manifests/" + dg + "?ns=ghcr.io", "ghcr.io", "a", "oci-manifest:m/" + dg, KindManifest},
		{"/v2/a/referrers/" + dg + "?artifactType=x&ns=ghcr.io", "ghcr.io", "a", "oci-referrers:m/ghcr.io/a@" + dg + "?artifactType=x", KindReferrers},
		{"/v2/a/tags/list?n=10", "docker.io", "a", "oci-tags:m/docker.io/a?n=10", KindTags},
	} {
		ref, err := Parse(httptest.NewRequest("GET", tc.url, nil), p)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if ref.Registry.Host != tc.host || ref.Name != tc.name || ref.Key() != tc.key || ref.Kind != tc.kind {
			t.Errorf("%s: %s %s %s %d, want %s %s %s %d", tc.url, ref.Registry.Host, ref.Name, ref.Key(), ref.Kind, tc.host, tc.name, tc.key, tc.kind)
		}
	}
	if ref, err := Parse(httptest.NewRequest("GET", "/v2/", nil), p); err != nil || ref.Kind != KindBase {
		t.Errorf("/v2/: %v %v", ref, err)
	}
}

func TestParseRefuses(t *testing.T) {
	p := mirror(t, "")
	for _, tc := range []struct {
		url    string
		status int
		code   string
	}{
		{"/v2/a/manifests/v1?ns=evil.example", 404, CodeNameUnknown},
		{"/v2/quay.io/a/manifests/v1", 404, CodeNameUnknown},
		{"/v2/a/manifests/v1", 404, CodeNameUnknown}, // no default
		{"/v2/a/manifests/v1?ns=docker.io&ns=ghcr.io", 400, CodeUnsupported},
		{"/v2/a%2Fb/manifests/v1?ns=docker.io", 400, CodeNameInvalid},
		{"/v2/A/manifests/v1?ns=docker.io", 400, CodeNameInvalid},
		{"/v2/a//b/manifests/v1?ns=docker.io", 400, CodeNameInvalid},
		{"/v2/a/../b/manifests/v1?ns=docker.io", 400, CodeNameInvalid},
		{"/v2/a/blobs/nothex?ns=docker.io", 400, CodeDigestInvalid},
		{"/v2/a/blobs/md5:abc?ns=docker.io", 400, CodeDigestInvalid},
		{"/v2/a/manifests/-bad?ns=docker.io", 400, CodeManifestInvalid},
		{"/v2/a/uploads/x?ns=docker.io", 404, CodeUnsupported},
		{"/v2/a/manifests/v1?ns=%zz", 400, CodeUnsupported},
	} {
		_, err := Parse(httptest.NewRequest("GET", tc.url, nil), p)
		var e *Error
		if !errors.As(err, &e) || e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%s: %v, want %d %s", tc.url, err, tc.status, tc.code)
		}
	}
}

func TestChallenges(t *testing.T) {
	ch, err := parseChallenge([]string{`Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull"`})
	if err != nil || ch.realm.Host != "auth.docker.io" || ch.params["service"] != "registry.docker.io" || ch.params["scope"] != "repository:library/alpine:pull" {
		t.Fatalf("%+v %v", ch, err)
	}
	if ch, err := parseChallenge([]string{`Basic realm="x"`}); err != nil || ch.scheme != "basic" {
		t.Fatalf("basic: %+v %v", ch, err)
	}
	for _, bad := range []string{"", "Bearer", `Bearer realm="ftp://x"`, `Bearer realm="https://x`, `Negotiate abc`, `Bearer realm`, `Bearer =x`} {
		if _, err := parseChallenge([]string{bad}); !errors.Is(err, ErrChallenge) {
			t.Errorf("%q: %v, want ErrChallenge", bad, err)
		}
	}
}
