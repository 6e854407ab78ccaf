package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A host is keyed as it arrives, but the node's HTTP client sends an
// origin a Host in ASCII: café.example goes out as xn--caf-dma.example,
// and a host made of fullwidth letters as the punycode of those. A
// request naming a host by bytes a host may not hold was keyed, and
// matched to a policy, under one name while its origin was sent another:
// the policy the operator wrote for xn--caf-dma.example (here: never
// cache) did not apply, the answer was stored under a key no purge of
// that host reaches. The Host field's own bytes were checked by the
// client port's parser, an absolute-form target's authority was not. Such
// a host is refused however it arrives; its ASCII spelling is served.
func TestHostIsKeyedAsTheOriginIsSentIt(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Write([]byte("page for " + r.Host))
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	set := &pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "idn", Hosts: []string{"xn--caf-dma.example"}, OriginHost: "client", Mode: pb.CacheMode_CACHE_MODE_BYPASS},
		{Name: "others", OriginHost: "client"},
	}}
	if err := n.ApplyPolicies(set); err != nil {
		t.Fatal(err)
	}
	addr := n.ClientAddr().String()
	for _, tc := range []struct{ name, target, host string }{
		{"Host", "/account", "caf\u00e9.example"},
		{"Host in fullwidth letters", "/account", "\uff43\uff41\uff46\u00e9.example"},
		{"Host with a byte that is no UTF-8", "/account", "caf\xe9.example"},
		{"absolute-form", "http://caf%C3%A9.example/account", "x"},
		{"absolute-form, a byte a host may not hold", "http://caf%3Ce%3E.example/account", "x"},
		{"absolute-form, a quote", `http://caf"e.example/account`, "x"},
	} {
		mu.Lock()
		before := len(hosts)
		mu.Unlock()
		got := raw(t, addr, "GET "+tc.target+" HTTP/1.1\r\nHost: "+tc.host+"\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") {
			t.Errorf("%s: answer %q, want 400", tc.name, firstLine(got))
		}
		mu.Lock()
		if seen := hosts[before:]; len(seen) != 0 {
			t.Errorf("%s: the origin was sent Host %q", tc.name, seen)
		}
		mu.Unlock()
	}
	// The ASCII spelling is served, by its policy.
	for range 2 {
		got := raw(t, addr, "GET /account HTTP/1.1\r\nHost: XN--CAF-DMA.example\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, "\r\nX-Cache: BYPASS\r\n") || !strings.Contains(got, "page for xn--caf-dma.example") {
			t.Fatalf("the punycode host: %q, want its policy's bypass", got)
		}
	}
}
