package policy

import (
	"net/http"
	"net/http/httptest"
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
	r.AddCookie(&http.Cookie{Name: "v", Value: "7"})
	tests := []struct{ tmpl, want string }{
		{"", "httpimg.example.com/a/b?x=1&y=2"},
		{"$host$uri", "img.example.com/a/b"},
		{"$host$uri|$http_accept_language", "img.example.com/a/b|fr"},
		{"$method:$host$uri?$args#$cookie_v", "GET:img.example.com/a/b?x=1&y=2#7"},
	}
	for _, tt := range tests {
		p, err := compile(&pb.CachePolicy{Name: "t", KeyTemplate: tt.tmpl})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Key("http", r); got != tt.want {
			t.Errorf("template %q: key %q, want %q", tt.tmpl, got, tt.want)
		}
	}
	if _, err := compile(&pb.CachePolicy{Name: "t", KeyTemplate: "$path"}); err == nil {
		t.Error("unknown variable accepted")
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
