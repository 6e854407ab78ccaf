package policy

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestMatchPrefersLongestPrefixThenExactHost(t *testing.T) {
	set, err := Empty.Apply(&pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{
		{Name: "any-root", PathPrefix: "/"},
		{Name: "any-img", PathPrefix: "/img/"},
		{Name: "wild-img", Hosts: []string{"*.example.com"}, PathPrefix: "/img/"},
		{Name: "exact-img", Hosts: []string{"cdn.example.com"}, PathPrefix: "/img/"},
		{Name: "exact-deep", Hosts: []string{"cdn.example.com"}, PathPrefix: "/img/big/"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ host, path, want string }{
		{"cdn.example.com", "/img/big/1", "exact-deep"},
		{"cdn.example.com", "/img/1", "exact-img"},
		{"www.example.com", "/img/1", "wild-img"},
		{"other.org", "/img/1", "any-img"},
		{"other.org", "/css/1", "any-root"},
	}
	for _, tt := range tests {
		if got := set.Match(tt.host, tt.path).Name; got != tt.want {
			t.Errorf("Match(%s, %s) = %s, want %s", tt.host, tt.path, got, tt.want)
		}
	}
	if got := Empty.Match("x", "/").Name; got != "default" {
		t.Errorf("empty set matched %s, want default", got)
	}
}

func TestKeyTemplate(t *testing.T) {
	r := httptest.NewRequest("GET", "http://Img.Example.com:8080/a/b?x=1&y=2", nil)
	r.Header.Set("Accept-Language", "fr")
	r.Header.Add("Accept", "application/vnd.oci.image.index.v1+json")
	r.Header.Add("Accept", "application/vnd.docker.distribution.manifest.v2+json")
	r.AddCookie(&http.Cookie{Name: "v", Value: "7"})
	tests := []struct{ tmpl, want string }{
		{"", "httpimg.example.com/a/b?x=1&y=2"},
		{"$host$uri", "img.example.com/a/b"},
		{"$host$uri|$http_accept_language", "img.example.com/a/b|fr"},
		{"$method:$host$uri?$args#$cookie_v", "GET:img.example.com/a/b?x=1&y=2#7"},
		// Every line of a field, joined as HTTP does.
		{"$uri|$http_accept", "/a/b|application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json"},
		{"$uri|$http_x_absent", "/a/b|"},
	}
	for _, tt := range tests {
		p, err := Compile(&pb.CachePolicy{Name: "t", KeyTemplate: tt.tmpl})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Key("http", r); got != tt.want {
			t.Errorf("template %q: key %q, want %q", tt.tmpl, got, tt.want)
		}
	}
	if _, err := Compile(&pb.CachePolicy{Name: "t", KeyTemplate: "$path"}); err == nil {
		t.Error("unknown variable accepted")
	}
	// Cookie lines are joined with "; ", as HTTP/2 joins them (RFC 9113
	// 8.2.3) on the peer hop and nginx's $http_cookie does: a request
	// whose cookies came on two lines has the key of one that sent them
	// on one, whichever way it reached the node.
	p, err := Compile(&pb.CachePolicy{Name: "t", KeyTemplate: "$uri|$http_cookie"})
	if err != nil {
		t.Fatal(err)
	}
	split := httptest.NewRequest("GET", "http://x/c", nil)
	split.Header["Cookie"] = []string{"a=1", "b=2"}
	joined := httptest.NewRequest("GET", "http://x/c", nil)
	joined.Header["Cookie"] = []string{"a=1; b=2"}
	if a, b := p.Key("http", split), p.Key("http", joined); a != b || b != "/c|a=1; b=2" {
		t.Errorf("cookies on two lines keyed %q, on one %q; want both /c|a=1; b=2", a, b)
	}
}

func TestApplyIncremental(t *testing.T) {
	s1, err := Empty.Apply(&pb.PolicySet{Revision: 3, Policies: []*pb.CachePolicy{{Name: "a", PathPrefix: "/a/"}, {Name: "b", PathPrefix: "/b/"}}})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := s1.Apply(&pb.PolicySet{Revision: 5, Incremental: true, SinceRevision: 3, Deleted: []string{"a"},
		Policies: []*pb.CachePolicy{{Name: "c", PathPrefix: "/c/"}}})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Revision() != 5 || s2.Len() != 2 || s2.Match("h", "/a/x").Name != "default" || s2.Match("h", "/c/x").Name != "c" {
		t.Fatalf("after the change: revision %d, %d policies", s2.Revision(), s2.Len())
	}
	if s1.Len() != 2 || s1.Match("h", "/a/x").Name != "a" {
		t.Fatal("applying a change altered the previous set")
	}
}

// FuzzCacheKey: any request line and Host a client can send gives a key
// without panicking; the host part is lower-case without port, and requests
// differing only in the host's case or port share a key.
func FuzzCacheKey(f *testing.F) {
	for _, s := range [][2]string{{"/a?b=1", "Example.COM:8080"}, {"/%2e%2e/x", "h"}, {"//x//y", "[::1]:80"}, {"*", "x."}, {"/a#frag", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, target, host string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
		if err != nil {
			return // refused by the HTTP server before any key is built
		}
		h := Host(r)
		if h != strings.ToLower(h) {
			t.Fatalf("Host(%q) = %q, not lower-case", r.Host, h)
		}
		key := Default.Key("http", r)
		if !strings.HasPrefix(key, "http"+h) {
			t.Fatalf("key %q does not start with scheme and host %q", key, h)
		}
		base := r.Host
		if hh, _, err := net.SplitHostPort(base); err == nil {
			base = hh
		}
		if strings.ContainsAny(base, "[]:") || strings.IndexFunc(base, func(c rune) bool { return c >= 0x80 }) >= 0 {
			return // an IPv6 literal, a malformed or non-ASCII host: kept as sent
		}
		r2 := r.Clone(r.Context())
		r2.Host = strings.ToUpper(base) + ":8443"
		if k2 := Default.Key("http", r2); k2 != key {
			t.Fatalf("host %q and %q give keys %q and %q", r.Host, r2.Host, key, k2)
		}
	})
}

// A policy's own targeted field is canonicalised; Cache-Control,
// CDN-Cache-Control and what is no field name are refused, naming the
// field.
func TestTargetedCacheControl(t *testing.T) {
	p, err := Compile(&pb.CachePolicy{Name: "t", TargetedCacheControl: "shardcache-cache-control"})
	if err != nil || len(p.Targeted) != 1 || p.Targeted[0] != "Shardcache-Cache-Control" {
		t.Fatalf("Compile: %v, policy %+v", err, p)
	}
	for _, bad := range []string{"Cache-Control", "cdn-cache-control", "two words", "x:y"} {
		if _, err := Compile(&pb.CachePolicy{Name: "t", TargetedCacheControl: bad}); err == nil || !strings.Contains(err.Error(), "targeted_cache_control") {
			t.Errorf("targeted_cache_control %q: %v, want a refusal naming the field", bad, err)
		}
	}
}

// stale_if_disconnected is on unless set false, and off under
// authorize_every_request, where setting it is refused, naming the field.
func TestStaleIfDisconnected(t *testing.T) {
	on, off := true, false
	for _, tt := range []struct {
		name  string
		p     *pb.CachePolicy
		want  bool
		error bool
	}{
		{"unset", &pb.CachePolicy{Name: "s"}, true, false},
		{"true", &pb.CachePolicy{Name: "s", StaleIfDisconnected: &on}, true, false},
		{"false", &pb.CachePolicy{Name: "s", StaleIfDisconnected: &off}, false, false},
		{"unset under authorize_every_request", &pb.CachePolicy{Name: "s", AuthorizeEveryRequest: true}, false, false},
		{"false under authorize_every_request", &pb.CachePolicy{Name: "s", AuthorizeEveryRequest: true, StaleIfDisconnected: &off}, false, false},
		{"true under authorize_every_request", &pb.CachePolicy{Name: "s", AuthorizeEveryRequest: true, StaleIfDisconnected: &on}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Compile(tt.p)
			if tt.error {
				if err == nil || !strings.Contains(err.Error(), "stale_if_disconnected") {
					t.Fatalf("Compile: %v, want a refusal naming stale_if_disconnected", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.StaleIfDisconnected != tt.want {
				t.Fatalf("StaleIfDisconnected %v, want %v", c.StaleIfDisconnected, tt.want)
			}
		})
	}
	if !Default.StaleIfDisconnected {
		t.Error("the default policy does not serve stale when disconnected")
	}
}

// Compile refuses what Check refuses, naming the field: nodes and the
// control plane keep one grammar.
func TestCompileRefusesWhatCheckRefuses(t *testing.T) {
	for field, p := range map[string]*pb.CachePolicy{
		"name":                   {Name: "Not A Name"},
		"hosts[0]":               {Name: "t", Hosts: []string{"Example.com:80"}},
		"origin_urls[0]":         {Name: "t", OriginUrls: []string{"ftp://x"}},
		"bypass[0]":              {Name: "t", Bypass: []*pb.BypassRule{{}}},
		"vary_by[0]":             {Name: "t", VaryBy: []string{"a b"}},
		"replication_factor":     {Name: "t", ReplicationFactor: MaxReplication + 1},
		"targeted_cache_control": {Name: "t", TargetedCacheControl: "cache-control"},
	} {
		v := Check(p)
		if len(v) != 1 || v[0].Field != field {
			t.Errorf("Check(%v) = %v; want one violation of %s", p, v, field)
		}
		if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), field+": ") {
			t.Errorf("Compile(%v) = %v; want an error naming %s", p, err, field)
		}
	}
	if v := Check(&pb.CachePolicy{Name: "ok", Hosts: []string{"*.example.com"}, OriginUrls: []string{"https://o.example:8443"}}); len(v) != 0 {
		t.Errorf("a valid policy: %v", v)
	}
}

func TestNormalEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/plain", "/plain"},
		{"/%7Euser", "/~user"},
		{"/caf%c3%a9", "/caf%C3%A9"},
		{"/a%2fb", "/a%2Fb"},
		{"/%41%2D%5f", "/A-_"},
		{"a=%20&b=%2b", "a=%20&b=%2B"},
		{"/bad%zz%4", "/bad%zz%4"},
		{"/end%", "/end%"},
		{"q=caf\u00e9", "q=caf%C3%A9"},
		{"/caf\u00e9%7e\xff", "/caf%C3%A9~%FF"},
	} {
		if got := NormalEscapes(tc.in); got != tc.want {
			t.Errorf("NormalEscapes(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
