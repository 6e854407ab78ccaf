package front

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A mirror policy with a pull token: only a client that presents it
// (Bearer, or as a Basic password) reaches the owner; writes are refused;
// /v2/ is answered by the node; a blob's key is its digest whichever
// upstream or form named it.
func TestMirrorChecksThePullTokenAndKeysByDigest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pull-token")
	if err := os.WriteFile(file, []byte("cluster-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := newTestFront(t, []*pb.CachePolicy{{Name: "m", PathPrefix: "/v2/", PullTokenFile: file, DefaultRegistry: "a.io",
		Registries: []*pb.Registry{{Host: "a.io", Url: "https://a.example"}, {Host: "b.io", Url: "https://b.example"}}}},
		func(c *Config) { c.Hot = nil })
	// A blob and a tag whose keys this node owns, so that the owner is
	// asked here rather than relayed.
	owned := func(keys ...string) bool {
		for _, k := range keys {
			if tf.rts.Load().Owner(k).GetId() != "a" {
				return false
			}
		}
		return true
	}
	digest, tag := "", ""
	for i := 0; digest == "" || tag == ""; i++ {
		if d := fmt.Sprintf("sha256:%064x", i); digest == "" && owned("oci-blob:m/"+d) {
			digest = d
		}
		if v := fmt.Sprintf("v%d", i); tag == "" && owned("oci-tag:m/a.io/app:"+v, "oci-tag:m/b.io/app:"+v) {
			tag = v
		}
	}
	blob := "/v2/app/blobs/" + digest
	for _, tc := range []struct {
		name   string
		header []string
		status int
	}{
		{"no credentials", nil, http.StatusUnauthorized},
		{"a wrong Bearer token", []string{"Authorization", "Bearer guess"}, http.StatusUnauthorized},
		{"a wrong Basic password", []string{"Authorization", "Basic dXNlcjpndWVzcw=="}, http.StatusUnauthorized},
		{"the Bearer token", []string{"Authorization", "Bearer cluster-secret"}, http.StatusOK},
		{"the token as a Basic password", []string{"Authorization", "Basic dXNlcjpjbHVzdGVyLXNlY3JldA=="}, http.StatusOK},
	} {
		before := len(tf.owner.requests())
		w := tf.get("GET", blob, tc.header...)
		reached := len(tf.owner.requests()) > before
		if w.Code != tc.status || reached != (tc.status == http.StatusOK) {
			t.Errorf("%s: %d (owner asked: %v), want %d", tc.name, w.Code, reached, tc.status)
		}
		if tc.status == http.StatusUnauthorized && (!strings.Contains(w.Body.String(), `"code":"UNAUTHORIZED"`) || w.Header().Get("Www-Authenticate") == "") {
			t.Errorf("%s: %q %q, want an OCI UNAUTHORIZED body and a challenge", tc.name, w.Body, w.Header().Get("Www-Authenticate"))
		}
	}
	auth := []string{"Authorization", "Bearer cluster-secret"}
	if w := tf.get("PUT", "/v2/app/manifests/v1", auth...); w.Code != http.StatusMethodNotAllowed || !strings.Contains(w.Body.String(), "UNSUPPORTED") {
		t.Errorf("a push: %d %s, want 405 UNSUPPORTED", w.Code, w.Body)
	}
	if w := tf.get("GET", "/v2/", auth...); w.Code != http.StatusOK || w.Header().Get("Docker-Distribution-Api-Version") == "" {
		t.Errorf("/v2/: %d %v, want the node's own answer", w.Code, w.Header())
	}
	// The same blob by ns=, by the path form and by the default: one key.
	before := len(tf.owner.requests())
	for _, p := range []string{blob + "?ns=b.io", "/v2/b.io/app/blobs/" + digest, blob} {
		tf.get("GET", p, auth...)
	}
	reqs := tf.owner.requests()[before:]
	if len(reqs) != 3 || reqs[0].Key != reqs[1].Key || reqs[1].Key != reqs[2].Key || reqs[0].Key != "oci-blob:m/"+digest {
		t.Fatalf("keys of one blob by three forms: %v", reqs)
	}
	// Tags are keyed by their upstream.
	tf.get("GET", "/v2/app/manifests/"+tag+"?ns=b.io", auth...)
	tf.get("GET", "/v2/app/manifests/"+tag, auth...)
	reqs = tf.owner.requests()
	if b, a := reqs[len(reqs)-2].Key, reqs[len(reqs)-1].Key; a != "oci-tag:m/a.io/app:"+tag || b != "oci-tag:m/b.io/app:"+tag {
		t.Fatalf("a tag of two upstreams keyed %q and %q, want each under its upstream", b, a)
	}
}
