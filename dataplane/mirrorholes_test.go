package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Two mirror policies share no content: a private mirror's (its pull
// token, its credentials) was served through a public one to anyone who
// named its tag or digest, once a token holder had pulled it.
func TestMirrorPoliciesShareNoContent(t *testing.T) {
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","secret":"PRIVATE"}`)
	layer := []byte("PRIVATE LAYER")
	sum := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	ld := sum(layer)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, pw, ok := r.BasicAuth(); !ok || u != "robot" || pw != "pw" {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		var b []byte
		switch r.URL.Path {
		case "/v2/myorg/secret/manifests/v1":
			b = manifest
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", sum(manifest))
		case "/v2/myorg/secret/blobs/" + ld:
			b = layer
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
		w.Write(b)
	}))
	defer reg.Close()
	dir := t.TempDir()
	tokenFile, creds := filepath.Join(dir, "pull-token"), filepath.Join(dir, "creds.json")
	os.WriteFile(tokenFile, []byte("cluster-secret\n"), 0o600)
	os.WriteFile(creds, []byte(`{"username":"robot","password":"pw"}`), 0o600)
	origin := httptest.NewServer(http.NotFoundHandler())
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	applyAll(t, &pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{
		{Name: "private", Hosts: []string{"private.example"}, PathPrefix: "/v2/", PullTokenFile: tokenFile, DefaultRegistry: "docker.io",
			Registries: []*pb.Registry{{Host: "docker.io", Url: reg.URL, CredentialsFile: creds}}},
		{Name: "public", Hosts: []string{"public.example"}, PathPrefix: "/v2/", DefaultRegistry: "docker.io",
			Registries: []*pb.Registry{{Host: "docker.io", Url: reg.URL}}},
	}}, n)
	base := "http://" + n.ClientAddr().String()
	get := func(host, path string, hdr ...string) (*http.Response, string) {
		return do(t, "GET", base+path, append([]string{"Host", host}, hdr...)...)
	}
	mpath, bpath := "/v2/myorg/secret/manifests/v1", "/v2/myorg/secret/blobs/"+ld
	accept := []string{"Accept", "application/vnd.oci.image.manifest.v1+json"}
	// Before anything is cached, the public mirror cannot read the private repository.
	if resp, body := get("public.example", "/v2/myorg/secret/manifests/v0", accept...); resp.StatusCode == http.StatusOK {
		t.Fatalf("public mirror, uncached private tag: %d %s", resp.StatusCode, body)
	}
	// A token holder pulls through the private mirror.
	for _, p := range []string{mpath, bpath} {
		if resp, body := get("private.example", p, append(accept, "Authorization", "Bearer cluster-secret")...); resp.StatusCode != 200 {
			t.Fatalf("private mirror %s: %d %s", p, resp.StatusCode, body)
		}
	}
	// No token, through the public mirror.
	for _, p := range []string{mpath, bpath} {
		resp, body := get("public.example", p, accept...)
		if resp.StatusCode == http.StatusOK && strings.Contains(body, "PRIVATE") {
			t.Errorf("public mirror (no pull token, anonymous upstream) %s: %d %s %q", p, resp.StatusCode, resp.Header.Get("X-Cache"), body)
		}
	}
}
