package front

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func TestForwardedChain(t *testing.T) {
	f := New(Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	tests := []struct {
		name, remote string
		in           http.Header
		xff, fwd     string
		client       string
	}{
		{"direct client", "192.0.2.7:5000", http.Header{}, "192.0.2.7", `for=192.0.2.7;host="shop.example:8080";proto=http`, "192.0.2.7"},
		{"untrusted client's chain is dropped", "192.0.2.7:5000",
			http.Header{"X-Forwarded-For": {"6.6.6.6"}, "Forwarded": {"for=6.6.6.6"}, "X-Real-Ip": {"6.6.6.6"}},
			"192.0.2.7", `for=192.0.2.7;host="shop.example:8080";proto=http`, "192.0.2.7"},
		{"trusted proxy's chain is kept and extended", "10.1.2.3:5000",
			http.Header{"X-Forwarded-For": {"198.51.100.9"}, "Forwarded": {"for=198.51.100.9"}},
			"198.51.100.9, 10.1.2.3", `for=198.51.100.9, for=10.1.2.3;host="shop.example:8080";proto=http`, "198.51.100.9"},
		{"the client is the nearest untrusted address", "10.1.2.3:5000",
			http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.9, 10.9.9.9"}},
			"6.6.6.6, 198.51.100.9, 10.9.9.9, 10.1.2.3", `for=10.1.2.3;host="shop.example:8080";proto=http`, "198.51.100.9"},
		{"IPv6 is quoted in Forwarded", "[2001:db8::1]:5000", http.Header{}, "2001:db8::1", `for="[2001:db8::1]";host="shop.example:8080";proto=http`, "2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tt.remote, Header: tt.in, Host: "shop.example:8080"}
			client, _ := f.forwardedFor(r)
			if r.Header.Get("X-Forwarded-Host") != "shop.example:8080" || r.Header.Get("X-Forwarded-Proto") != "http" {
				t.Fatalf("X-Forwarded-Host %q, X-Forwarded-Proto %q; want the client's host and scheme",
					r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"))
			}
			if client != tt.client || r.Header.Get("X-Forwarded-For") != tt.xff || r.Header.Get("Forwarded") != tt.fwd || r.Header.Get("X-Real-Ip") != tt.client {
				t.Fatalf("client %q, X-Forwarded-For %q, Forwarded %q, X-Real-IP %q; want %q, %q, %q, %q", client,
					r.Header.Get("X-Forwarded-For"), r.Header.Get("Forwarded"), r.Header.Get("X-Real-Ip"), tt.client, tt.xff, tt.fwd, tt.client)
			}
		})
	}
}

func TestRemoveDotSegments(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"/a/b/c/./../../g", "/a/g", true},
		{"/a/.", "/a/", true},
		{"/a/..", "/", true},
		{"/a//../b", "/a/b", true},
		{"/./a", "/a", true},
		{"/..", "", false},
		{"/a/../..", "", false},
		{"/a/.b/..c", "/a/.b/..c", true},
	} {
		got, ok := removeDotSegments(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("removeDotSegments(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestRequestIDs: a trusted proxy's valid X-Request-Id is the request's
// id; anyone else's, or an invalid one, is replaced by one the node
// assigns, unique per request; a PURGE's is its purge's and is kept.
func TestRequestIDs(t *testing.T) {
	f := New(Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	assigned := map[string]bool{}
	for _, tt := range []struct {
		name, remote, method, sent string
		keep                       bool // the id is the one sent
	}{
		{"none sent", "192.0.2.7:5000", "GET", "", false},
		{"a client's is not believed", "192.0.2.7:5000", "GET", "client-chosen", false},
		{"a trusted proxy's is kept", "10.1.2.3:5000", "GET", "lb-4f2a:17", true},
		{"an invalid one is replaced", "10.1.2.3:5000", "GET", "-bad id", false},
		{"one too long is replaced", "10.1.2.3:5000", "GET", strings.Repeat("a", maxRequestID+1), false},
		{"a PURGE's is its purge's", "192.0.2.7:5000", "PURGE", "purge-1", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.sent != "" {
				h.Set("X-Request-Id", tt.sent)
			}
			r := &http.Request{Method: tt.method, RemoteAddr: tt.remote, Header: h, Host: "shop.example"}
			_, id := f.forwardedFor(r)
			if got := r.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != id {
				t.Fatalf("X-Request-Id %q after arrival, id %q; want the id, once", got, id)
			}
			if tt.keep != (id == tt.sent) {
				t.Fatalf("id %q for %q sent: want it kept %t", id, tt.sent, tt.keep)
			}
			if !tt.keep {
				if !validRequestID(id) || assigned[id] {
					t.Fatalf("assigned %q: invalid, or assigned twice", id)
				}
				assigned[id] = true
			}
		})
	}
}
