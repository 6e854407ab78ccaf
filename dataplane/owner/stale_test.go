package owner

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// An origin that closes the connection without answering leaves the node
// disconnected (RFC 9111 4.2.4): a stored response is served STALE without
// any stale-if-error, unless the response must be revalidated or the
// policy turns it off; other failures give the 504 of a stored response
// that may not be served.
func TestStaleWhenDisconnected(t *testing.T) {
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		cc := "max-age=60"
		if r.URL.Path == "/must" {
			cc += ", must-revalidate"
		}
		w.Header().Set("Cache-Control", cc)
		w.Header().Set("Age", "120")
		io.WriteString(w, "kept")
	})
	off := false
	noStale := policyOf(t, &pb.CachePolicy{Name: "off", StaleIfDisconnected: &off})
	for _, path := range []string{"/plain", "/must"} {
		to.serve(request(path, nil))
		to.serve(request(path, noStale))
	}
	closed := &url.Error{Op: "Get", URL: "http://origin.internal/plain", Err: io.EOF} // as net/http reports it
	refused := &url.Error{Op: "Get", URL: "http://origin.internal/plain", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	for _, tt := range []struct {
		name, path string
		p          *policy.Policy
		err        error
		code       int
		reason     string // Cache-Status detail
	}{
		{"closed without an answer", "/plain", nil, closed, http.StatusOK, httpcache.ReasonStaleIfDisconnected},
		{"refused", "/plain", nil, refused, http.StatusGatewayTimeout, httpcache.ReasonOriginError},
		{"closed, must-revalidate", "/must", nil, closed, http.StatusGatewayTimeout, httpcache.ReasonOriginError},
		{"closed, the policy's stale_if_disconnected off", "/plain", noStale, closed, http.StatusGatewayTimeout, httpcache.ReasonOriginError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			to.origin.mu.Lock()
			to.origin.err = tt.err
			to.origin.mu.Unlock()
			w, out := to.serve(request(tt.path, tt.p))
			cs := w.Header().Get("Cache-Status")
			if w.Code != tt.code || out.Member.Detail != tt.reason || !strings.HasSuffix(cs, "; detail="+tt.reason) {
				t.Fatalf("%d (X-Cache %s, Cache-Status %q), want %d, detail=%s", w.Code, w.Header().Get("X-Cache"), cs, tt.code, tt.reason)
			}
			if tt.code != http.StatusOK {
				return
			}
			if w.Header().Get("X-Cache") != httpcache.CacheStale || w.Body.String() != "kept" || out.Member.Cache != httpcache.CacheStale ||
				!strings.HasPrefix(cs, "a; hit; ttl=-") {
				t.Fatalf("X-Cache %s, body %q, Cache-Status %q, outcome %+v", w.Header().Get("X-Cache"), w.Body.String(), cs, out)
			}
		})
	}
}
