package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// registryOrigin answers manifests as a container registry does: the type
// chosen by Accept (404 when it has none the client takes), no Vary, and
// 304 to any If-None-Match that names one of its digests, whatever the
// Accept.
type registryOrigin struct{ requests atomic.Int64 }

func (o *registryOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.requests.Add(1)
	w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
	accept := strings.Join(r.Header.Values("Accept"), ",")
	if strings.HasPrefix(r.URL.Path, "/plain/") {
		w.Header().Del("Docker-Distribution-Api-Version") // an origin that is no registry
	}
	for _, t := range []string{"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.v2+json"} {
		if strings.Contains(accept, t) {
			etag := `"` + t[len(t)-12:] + `"`
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("ETag", etag)
			w.Header().Set("Content-Type", t)
			if inm := r.Header.Get("If-None-Match"); inm != "" {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Write([]byte(t))
			return
		}
	}
	http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
}

// TestRegistryManifestsVaryOnAccept: every client gets the manifest type
// the registry would give it, through the owner and through a relay,
// though the registry sends no Vary; an Accept split over lines is the
// same variant, one reordered another; registry_aware off shows what the
// default prevents; vary_by does the same for another origin.
func TestRegistryManifestsVaryOnAccept(t *testing.T) {
	o := &registryOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, b, e := startPair(t, origin.URL, noHotKeys) // every answer from the owner
	set := &pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "unaware", PathPrefix: "/v2/unaware/", RegistryAware: proto.Bool(false)},
		{Name: "plain", PathPrefix: "/plain/", VaryBy: []string{"Accept"}},
	}}
	for _, n := range []*Node{a, b} {
		if err := n.ApplyPolicies(set); err != nil {
			t.Fatal(err)
		}
	}
	oci, docker := "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.v2+json"
	for _, via := range []string{"owner", "relay"} {
		node := b
		if via == "relay" {
			node = a
		}
		check := func(path string, accept []string, code int, ctype, cache string) {
			t.Helper()
			req, _ := http.NewRequest("GET", "http://"+node.ClientAddr().String()+path, nil)
			for _, v := range accept {
				req.Header.Add("Accept", v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("Content-Type")
			if code != http.StatusOK {
				got = ""
			}
			if resp.StatusCode != code || got != ctype || cache != "" && resp.Header.Get("X-Cache") != cache {
				t.Fatalf("%s %s Accept %q: %d %q %s (node %s, origin %d, vary %q); want %d %q %s", via, path, accept, resp.StatusCode, got, resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"), o.requests.Load(), resp.Header.Values("Vary"), code, ctype, cache)
			}
		}
		path := pathOwnedBy(t, e, "/v2/app/manifests/"+via, "b")
		check(path, []string{oci + ", " + docker}, 200, oci, "MISS")
		check(path, []string{docker}, 200, docker, "MISS")
		check(path, []string{"application/vnd.docker.distribution.manifest.v1+json"}, 404, "", "")
		check(path, []string{oci, docker}, 200, oci, "HIT")  // the first variant, asked over two lines
		check(path, []string{docker, oci}, 200, oci, "MISS") // another order: a negotiator may answer it otherwise
		check(path, []string{docker}, 200, docker, "HIT")
		if vary := varyOf(t, node, path, docker); !strings.Contains(vary, "Accept") {
			t.Fatalf("%s: the answer's Vary %q does not name Accept", via, vary)
		}

		unaware := pathOwnedBy(t, e, "/v2/unaware/manifests/"+via, "b")
		check(unaware, []string{oci}, 200, oci, "MISS")
		check(unaware, []string{docker}, 200, oci, "HIT") // the wrong type: what registry_aware prevents

		plain := pathOwnedBy(t, e, "/plain/"+via, "b")
		check(plain, []string{oci}, 200, oci, "MISS")
		check(plain, []string{docker}, 200, docker, "MISS")
		check(plain, []string{oci}, 200, oci, "HIT")
	}
}

func varyOf(t *testing.T, n *Node, path, accept string) string {
	t.Helper()
	resp, _ := do(t, "GET", "http://"+n.ClientAddr().String()+path, "Accept", accept)
	return strings.Join(resp.Header.Values("Vary"), ", ")
}
