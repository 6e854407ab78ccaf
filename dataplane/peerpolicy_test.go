package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// The front and the owner choose a request's policy alike, by the host's
// name: with a port in Host the front chose the default policy and filled
// the tenant's key from the default origin, which the tenant's clients,
// relayed to that owner, were then served.
func TestFrontAndOwnerChooseOnePolicyWhateverThePort(t *testing.T) {
	tenant := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "tenant page "+r.URL.Path)
	}))
	defer tenant.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "ATTACKER-CHOSEN default-origin page "+r.URL.Path)
	}))
	defer other.Close()
	a, b, e := startPair(t, other.URL, noHotKeys, noHandoff)
	set := &pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{
		{Name: "tenant", Hosts: []string{"tenant.example"}, OriginUrls: []string{tenant.URL}},
	}}
	applyAll(t, set, a, b)
	path := hostPathOwnedBy(t, e, "tenant.example", "/t/", "b") // by its key: the host without port
	// The attacker asks the owner b directly, naming a port.
	raw(t, b.ClientAddr().String(), "GET "+path+" HTTP/1.1\r\nHost: tenant.example:80\r\nConnection: close\r\n\r\n")
	// A victim asks node a, without a port: relayed to b, served by the
	// tenant's policy.
	got := raw(t, a.ClientAddr().String(), "GET "+path+" HTTP/1.1\r\nHost: tenant.example\r\nConnection: close\r\n\r\n")
	body := got[strings.LastIndex(got, "\r\n\r\n")+4:]
	if body != "tenant page "+path {
		t.Fatalf("victim (Host tenant.example at a, relayed to b) got %q, want the tenant origin's %q\nfull answer:\n%s", body, "tenant page "+path, got)
	}
}

// A mirror's pull token is asked for whatever the port in Host: with one,
// the front chose the default policy, asked for no token, and relayed to
// an owner that served the mirror's content.
func TestAPortInHostSkipsNoPullToken(t *testing.T) {
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		io.WriteString(w, `{"schemaVersion":2,"layers":[],"secret":"PRIVATE-IMAGE `+r.URL.Path+`"}`)
	}))
	defer reg.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "default origin")
	}))
	defer other.Close()
	tokenFile := filepath.Join(t.TempDir(), "pull-token")
	if err := os.WriteFile(tokenFile, []byte("cluster-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, b, e := startPair(t, other.URL, noHotKeys, noHandoff)
	set := &pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{{Name: "mirror", Hosts: []string{"mirror.example"}, PathPrefix: "/v2/",
		PullTokenFile: tokenFile, DefaultRegistry: "reg.test", Registries: []*pb.Registry{{Host: "reg.test", Url: reg.URL}}}}}
	applyAll(t, set, a, b)
	path := hostPathOwnedBy(t, e, "mirror.example", "/v2/app/manifests/", "b")
	// Without the token, Host as configured: refused at the front.
	got := raw(t, a.ClientAddr().String(), "GET "+path+" HTTP/1.1\r\nHost: mirror.example\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 401") {
		t.Fatalf("no token: %q, want 401", firstLine(got))
	}
	// Without the token, Host with a port: relayed to b and served.
	got = raw(t, a.ClientAddr().String(), "GET "+path+" HTTP/1.1\r\nHost: mirror.example:443\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 401") {
		t.Fatalf("no token, Host mirror.example:443 at a: answered\n%s\nwant 401 (the mirror's pull token is required)", got)
	}
}

// An origin's answer cannot speak for the owner on the hop: its
// X-Shardcache-* fields are not stored, so the purge revision a peer reads
// is the owner's own, from a miss and from a hit alike.
func TestAnOriginsInternalFieldsAreNotStored(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("X-Shardcache-Purge-Revision", "999999999")
		io.WriteString(w, "page")
	}))
	defer origin.Close()
	_, b, _ := startPair(t, origin.URL, noHotKeys, noHandoff)
	h2c := &http.Client{Transport: &http.Transport{Protocols: relay.Protocols(false)}}
	for i := range 2 { // a miss, then a hit from the store
		req, _ := http.NewRequest("GET", "http://"+b.PeerAddr().String()+"/p", nil)
		req.Header.Set(hop.Marker, "a")
		req.Header.Set(hop.SchemeField, "http")
		resp, err := h2c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Values(hop.PurgeRevisionField); len(got) != 1 || got[0] != "0" {
			t.Errorf("peer answer %d (%s): %s %q, want the owner's own revision \"0\"", i, resp.Header.Get("X-Cache"), hop.PurgeRevisionField, got)
		}
	}
}

// An origin's X-Shardcache-Refused did not reach the hop as the owner's
// refusal: the key is served by its owner, the origin asked once.
func TestAnOriginCannotRefuseForTheOwner(t *testing.T) {
	o := &testOrigin{header: http.Header{"X-Shardcache-Refused": {"origin says so"}}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, b, e := startPair(t, origin.URL, noHotKeys, noHandoff)
	path := pathOwnedBy(t, e, "/k/", "b")
	do(t, "GET", "http://"+b.ClientAddr().String()+path) // b stores it
	resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+path)
	if node := resp.Header.Get("X-Cache-Node"); node != "b" || o.count(path) != 1 {
		t.Fatalf("relayed request served by %q, origin asked %d times; want the owner b, origin once (refused metric %v)",
			node, o.count(path), metricValue(t, a, "shardcache_peer_requests_total", `result="refused"`))
	}
}

// applyAll applies set on every node.
func applyAll(t *testing.T, set *pb.PolicySet, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		if err := n.ApplyPolicies(set); err != nil {
			t.Fatal(err)
		}
	}
}
