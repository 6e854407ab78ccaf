package front

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/origin"
	"github.com/shardcache/shardcache/dataplane/routes"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// arrivalFront is a Front with one policy keyed by a tenant field and
// varying by X-Device, and a ring of two members.
func arrivalFront(t testing.TB) *Front {
	t.Helper()
	set, err := policy.Empty.Apply(&pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{{
		Name: "tenants", PathPrefix: "/t/", KeyTemplate: "$scheme$host$request_uri$http_x_tenant", VaryBy: []string{"X-Device"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := routes.New(&pb.RingEpoch{Epoch: 1, Members: []*pb.Member{{Id: "a", PeerAddress: "127.0.0.1:9001"}, {Id: "b", PeerAddress: "127.0.0.1:9002"}}})
	if err != nil {
		t.Fatal(err)
	}
	var ps atomic.Pointer[policy.Set]
	var rts atomic.Pointer[routes.Table]
	ps.Store(set)
	rts.Store(rt)
	return New(Config{ID: "a", Via: routes.Via("a", "127.0.0.1:9001"), Policies: &ps, Routes: &rts})
}

func TestKeyedHost(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{"www.example.com", "www.example.com", ""},
		{"WWW.Example.COM.", "www.example.com", ""},
		{"www.example.com:8080", "www.example.com:8080", ""},
		{"WWW.Example.com.:8080", "www.example.com:8080", ""},
		{"www.example.com:", "www.example.com", ""},
		{"[2001:db8::1]:443", "[2001:db8::1]:443", ""},
		{"[2001:db8::1]", "[2001:db8::1]", ""},
		{"www.example.com:evil.example", "", "not a number"},
		{"www.example.com:123456", "", "not a number"},
		{"[nonsense]:80", "", "IPv6"},
		{"caf\u00e9.example", "", "ASCII form"},
		{"\u212aey.example", "", "ASCII form"}, // the Kelvin sign, which strings.ToLower makes a k
		{"x<y>.example", "", "ASCII form"},
		{`x"y.example`, "", "ASCII form"},
		{"x%41.example", "", "ASCII form"},
	} {
		got, err := keyedHost(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("keyedHost(%q) = %q, %v; want an error saying %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("keyedHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// A Connection may name hop-by-hop fields of its own, which go; naming a
// field the node keys, negotiates, forwards or rewrites by is refused,
// deleting nothing.
func TestConnectionMayNotNameAFieldTheNodeReads(t *testing.T) {
	f := arrivalFront(t)
	for _, tt := range []struct {
		conn    string
		path    string
		refused string
	}{
		{"keep-alive, X-Private-Hop", "/", ""},
		{"Accept", "/", "Accept"},
		{"accept-encoding", "/", "Accept-Encoding"},
		{"X-Forwarded-For", "/", "X-Forwarded-For"},
		{"x_forwarded_host", "/", "X_forwarded_host"},
		{"Host", "/", "Host"},
		{"X-Shardcache-Hop", "/", "X-Shardcache-Hop"},
		{"X-Tenant", "/t/page", "X-Tenant"}, // the policy's key
		{"X-Device", "/t/page", "X-Device"}, // its vary_by
		{"X-Tenant", "/other", ""},          // another policy's field
	} {
		r := &http.Request{Method: "GET", Host: "shop.example", URL: &url.URL{Path: tt.path}, Header: http.Header{
			"Connection": {tt.conn}, "Accept": {"text/html"}, "X-Private-Hop": {"1"}, "X-Tenant": {"t1"}, "Keep-Alive": {"timeout=5"}}}
		_, refused := f.check(r)
		switch {
		case tt.refused == "" && refused != nil:
			t.Errorf("Connection: %s refused: %s", tt.conn, refused.msg)
		case tt.refused != "" && (refused == nil || refused.status != http.StatusBadRequest || !strings.Contains(refused.msg, tt.refused)):
			t.Errorf("Connection: %s: %+v; want 400 naming %s", tt.conn, refused, tt.refused)
		case tt.refused != "" && r.Header.Get("Accept") == "":
			t.Errorf("Connection: %s: a refused request lost its Accept", tt.conn)
		case tt.refused == "" && (r.Header.Get("Connection") != "" || r.Header.Get("Keep-Alive") != "" || tt.conn != "X-Tenant" && r.Header.Get("X-Private-Hop") != ""):
			t.Errorf("Connection: %s: hop-by-hop fields left: %v", tt.conn, r.Header)
		}
	}
}

func TestViaNamingTheClusterIsALoop(t *testing.T) {
	f := arrivalFront(t)
	for _, tt := range []struct {
		via  []string
		loop bool
	}{
		{[]string{"1.1 varnish, 1.1 edge.example (proxy)"}, false},
		{[]string{"1.1 " + routes.Via("b", "127.0.0.1:9002")}, true},
		{[]string{"1.0 cdn", "1.1 " + routes.Via("a", "127.0.0.1:9001") + " (shardcache)"}, true},
		{[]string{"1.1 " + routes.Via("b", "10.0.0.2:9002")}, false}, // another cluster's b
		{[]string{strings.Repeat("1.1 p, ", 16) + "1.1 p"}, true},
	} {
		r := &http.Request{Method: "GET", Host: "shop.example", URL: &url.URL{Path: "/"}, Header: http.Header{"Via": tt.via}}
		_, refused := f.check(r)
		if got := refused != nil && refused.status == http.StatusLoopDetected; got != tt.loop {
			t.Errorf("Via %q: loop %v (%+v), want %v", tt.via, got, refused, tt.loop)
		}
	}
}

func TestLoggedURIRedactsSecrets(t *testing.T) {
	for in, want := range map[string]string{
		"/a?x=1":              "/a?x=1",
		"/a?token=s3cret&x=1": "/a?token=REDACTED&x=1",
		"/o?X-Amz-Signature=abc&X-Amz-Credential=k": "/o?X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED",
		"/a?access%5Ftoken=s&flag":                  "/a?access%5Ftoken=REDACTED&flag",
	} {
		u, _ := url.ParseRequestURI(in)
		if got := loggedURI(u); got != want {
			t.Errorf("loggedURI(%s) = %s, want %s", in, got, want)
		}
	}
}

// sentFields are the fields a request is keyed and varied by, as the
// request holds them: the policy's own and the negotiation fields a Vary
// may name.
var sentFields = []string{"X-Tenant", "X-Device", "Accept", "Accept-Encoding", "Accept-Language", "Cookie", "Authorization", "X-Forwarded-For", "Forwarded"}

// FuzzArrivalSendsWhatItKeys: whatever fields and Connection tokens a
// client sends, a request that arrives is forwarded with the very values
// its key and variant were computed from: what the origin receives is
// what was keyed.
func FuzzArrivalSendsWhatItKeys(f *testing.F) {
	f.Add("Accept", "application/json", "x-tenant, keep-alive", "/t/x")
	f.Add("X-Tenant", "t2", "Accept", "/t/y")
	f.Add("X-Device", "phone", "x-device", "/t/z")
	f.Add("Cookie", "a=b", "cookie, te", "/")
	f.Add("Accept-Encoding", "gzip", "X-Forwarded-For", "/")
	f.Add("X-Other", "v", "x-other, upgrade", "/t/")
	f.Add("X-Other", "v", "x-tenant", "/other") // X-Tenant keys nothing here: removed before it is read
	front := arrivalFront(f)
	oc := origin.New(origin.Config{Default: &url.URL{Scheme: "http", Host: "origin.example"}, Via: "a.000000"})
	f.Fuzz(func(t *testing.T, field, value, conn, path string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?#% \x00") {
			t.Skip()
		}
		h := http.Header{"Accept": {"text/html"}, "X-Tenant": {"t1"}, "X-Device": {"desk"}, "Connection": {conn}}
		if name := http.CanonicalHeaderKey(field); token(name) {
			h[name] = append(h[name], value)
		}
		r := &http.Request{Method: "GET", Host: "shop.example", URL: &url.URL{Path: path}, Header: h, RemoteAddr: "192.0.2.9:1234"}
		p, refused := front.check(r)
		if refused != nil {
			return // answered without being sent anywhere
		}
		front.forwardedFor(r)
		key := p.Key(hop.Scheme(r), r)
		variant := httpcache.VariantKey(key, []string{"accept", "accept-encoding", "x-device"}, r.Header)
		out, err := oc.Request(context.Background(), r, &url.URL{Scheme: "http", Host: "origin.example"}, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range sentFields {
			if !slices.Equal(r.Header[name], out.Header[name]) {
				t.Fatalf("%s: keyed %q, sent %q (key %q, variant %q, Connection %q)", name, r.Header[name], out.Header[name], key, variant, conn)
			}
		}
		if relayed := hop.RelayHeader(r, "a", 1); !slices.Equal(relayed["X-Tenant"], r.Header["X-Tenant"]) || !slices.Equal(relayed["Accept"], r.Header["Accept"]) {
			t.Fatalf("relayed %v, keyed %v", relayed, r.Header)
		}
		if !strings.Contains(out.Header.Get("X-Forwarded-For"), "192.0.2.9") {
			t.Fatalf("the forwarded chain the node set was lost: %q", out.Header.Get("X-Forwarded-For"))
		}
	})
}

// token reports whether s is a non-empty HTTP token (RFC 9110 5.6.2), as a
// field name must be.
func token(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}
