package dataplane

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// An unsafe request's success invalidates the URLs its answer's Location
// and Content-Location name only under the request's own policy: a login
// origin that redirects a POST to the page its ?next= names dropped, at
// any client's will, a URL of another policy whose own origin refuses
// every unsafe method.
func TestALocationInvalidatesOnlyItsOwnPolicysContent(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			http.Redirect(w, r, r.URL.Query().Get("next"), http.StatusSeeOther) // reflected, same host
			return
		}
		w.Write([]byte("api"))
	}))
	defer api.Close()
	static := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "read-only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write([]byte("static " + r.URL.Path))
	}))
	defer static.Close()

	_, n := startOne(t, static.URL)
	set := &pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{
		{Name: "api", Hosts: []string{"shop.test"}, PathPrefix: "/api/", OriginUrls: []string{api.URL}, Mode: pb.CacheMode_CACHE_MODE_LOCAL},
		{Name: "static", Hosts: []string{"shop.test"}, PathPrefix: "/static/", OriginUrls: []string{static.URL},
			Mode: pb.CacheMode_CACHE_MODE_LOCAL, DefaultTtl: durationpb.New(time.Hour)},
	}}
	if err := n.ApplyPolicies(set); err != nil {
		t.Fatal(err)
	}
	base := "http://" + n.ClientAddr().String()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string) *http.Response {
		req, _ := http.NewRequest(method, base+path, nil)
		req.Host = "shop.test"
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	send("GET", "/static/app.js")
	if c := send("GET", "/static/app.js").Header.Get("X-Cache"); c != "HIT" {
		t.Fatalf("setup: X-Cache %q, want HIT", c)
	}
	// The static origin refuses: nothing is invalidated.
	if resp := send("POST", "/static/app.js"); resp.StatusCode != 405 {
		t.Fatalf("setup: POST to static answered %d", resp.StatusCode)
	}
	if c := send("GET", "/static/app.js").Header.Get("X-Cache"); c != "HIT" {
		t.Fatalf("after a refused POST: X-Cache %q, want HIT", c)
	}
	// Through the other policy's origin:
	resp := send("POST", "/api/login?next=/static/app.js")
	t.Logf("POST /api/login?next=/static/app.js -> %d Location: %s", resp.StatusCode, resp.Header.Get("Location"))
	if c := send("GET", "/static/app.js").Header.Get("X-Cache"); c != "HIT" {
		t.Fatalf("a POST answered by policy \"api\"'s origin dropped policy \"static\"'s /static/app.js (X-Cache %q): "+
			"a client evicts any URL of another policy (another origin) at will", c)
	}
}
