package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/opsclient"
)

// What changes or reads the node's insides needs a token, from loopback
// too (a sidecar proxy connects from loopback): /drain (a POST) and pprof
// the admin token, the operator views the admin or the read-only ops
// token. The probes' and the scraper's paths stay open; trusting loopback
// takes a setting of its own.
func TestOpsListenerGuardsWhatChangesOrReadsTheNode(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL, func(c *Config) { c.AdminToken = "s3cret"; c.OpsToken = "read-only" })
	ops := n.opsHandler()
	serve := func(method, path, remote, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = remote
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		ops.ServeHTTP(w, r)
		return w
	}
	guarded := []string{"POST /drain", "GET /debug/pprof/", "GET /debug/pprof/cmdline", "GET /debug/pprof/symbol", "GET /stats", "GET /inspect?url=/x", "GET /members"}
	for _, remote := range []string{"192.0.2.1:1234", "127.0.0.1:1234", "[::1]:1234"} {
		for _, mp := range guarded {
			method, path, _ := strings.Cut(mp, " ")
			if w := serve(method, path, remote, ""); w.Code != http.StatusUnauthorized {
				t.Fatalf("%s %s from %s without a token: %d, want 401", method, path, remote, w.Code)
			}
			if w := serve(method, path, remote, "Bearer wrong"); w.Code != http.StatusUnauthorized {
				t.Fatalf("%s %s with a wrong token: %d, want 401", method, path, w.Code)
			}
		}
	}
	for _, mp := range []string{"POST /drain", "GET /debug/pprof/cmdline"} {
		method, path, _ := strings.Cut(mp, " ")
		if w := serve(method, path, "127.0.0.1:1", "Bearer read-only"); w.Code != http.StatusUnauthorized {
			t.Fatalf("%s %s with the read-only token: %d, want 401", method, path, w.Code)
		}
	}
	if w := serve("GET", "/stats", "192.0.2.1:1", "Bearer read-only"); w.Code != 200 {
		t.Fatalf("/stats with the read-only token: %d", w.Code)
	}
	if w := serve("GET", "/debug/pprof/cmdline", "192.0.2.1:1", "Bearer s3cret"); w.Code != 200 {
		t.Fatalf("cmdline with the admin token: %d", w.Code)
	}
	if w := serve("GET", "/drain", "127.0.0.1:1", "Bearer s3cret"); w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /drain: %d, want 405", w.Code)
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if w := serve("GET", path, "192.0.2.1:1", ""); w.Code != 200 {
			t.Fatalf("%s off loopback: %d %s, want it open", path, w.Code, w.Body)
		}
	}
	// A warm grant (what the control plane sends) opens POST /warm of the
	// node it names, signed with the admin token, and nothing else.
	soon := time.Now().Add(time.Minute)
	grant := "Bearer " + opsclient.WarmGrant("s3cret", n.cfg.ID, soon)
	if w := serve("POST", "/warm", "192.0.2.1:1", grant); w.Code == http.StatusUnauthorized {
		t.Fatalf("POST /warm with a grant for this node: %d %s", w.Code, w.Body)
	}
	for name, auth := range map[string]string{
		"for another node":          "Bearer " + opsclient.WarmGrant("s3cret", "node-9", soon),
		"signed with another token": "Bearer " + opsclient.WarmGrant("wrong", n.cfg.ID, soon),
		"expired":                   "Bearer " + opsclient.WarmGrant("s3cret", n.cfg.ID, time.Now().Add(-time.Second)),
		"the read-only token":       "Bearer read-only",
	} {
		if w := serve("POST", "/warm", "192.0.2.1:1", auth); w.Code != http.StatusUnauthorized {
			t.Errorf("POST /warm with a grant %s: %d, want 401", name, w.Code)
		}
	}
	for _, mp := range []string{"POST /drain", "GET /stats", "GET /debug/pprof/cmdline"} {
		method, path, _ := strings.Cut(mp, " ")
		if w := serve(method, path, "192.0.2.1:1", grant); w.Code != http.StatusUnauthorized {
			t.Errorf("%s %s with a warm grant: %d, want 401", method, path, w.Code)
		}
	}
	// A read grant (what the admin SDK sends) opens the views of the node
	// it names, signed with the admin or the ops token, and nothing else.
	for _, token := range []string{"s3cret", "read-only"} {
		read := "Bearer " + opsclient.ReadGrant(token, n.cfg.ID, soon)
		if w := serve("GET", "/stats", "192.0.2.1:1", read); w.Code != 200 {
			t.Fatalf("/stats with a read grant signed with %q: %d %s", token, w.Code, w.Body)
		}
		for _, mp := range []string{"POST /drain", "POST /warm", "GET /debug/pprof/cmdline"} {
			method, path, _ := strings.Cut(mp, " ")
			if w := serve(method, path, "192.0.2.1:1", read); w.Code != http.StatusUnauthorized {
				t.Errorf("%s %s with a read grant signed with %q: %d, want 401", method, path, token, w.Code)
			}
		}
	}
	for name, auth := range map[string]string{
		"for another node":          "Bearer " + opsclient.ReadGrant("s3cret", "node-9", soon),
		"signed with another token": "Bearer " + opsclient.ReadGrant("wrong", n.cfg.ID, soon),
		"expired":                   "Bearer " + opsclient.ReadGrant("read-only", n.cfg.ID, time.Now().Add(-time.Second)),
	} {
		if w := serve("GET", "/stats", "192.0.2.1:1", auth); w.Code != http.StatusUnauthorized {
			t.Errorf("/stats with a read grant %s: %d, want 401", name, w.Code)
		}
	}
	if n.front.Draining() {
		t.Fatal("a refused /drain drained the node")
	}
	n.cfg.OpsTrustLoopback = true
	ops = n.opsHandler()
	if w := serve("GET", "/stats", "127.0.0.1:1", ""); w.Code != 200 {
		t.Fatalf("/stats from loopback with OpsTrustLoopback: %d", w.Code)
	}
	if w := serve("GET", "/stats", "192.0.2.1:1", ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("/stats off loopback with OpsTrustLoopback, no token: %d", w.Code)
	}
}

// The load report's origin requests count bypassed requests as well as
// fills: both reach the origin, and cachectl's offload figure reads them.
func TestLoadReportCountsBypassInOriginRequests(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	base := "http://" + n.ClientAddr().String()
	do(t, "GET", base+"/filled")
	do(t, "GET", base+"/filled") // a hit
	do(t, "POST", base+"/posted")
	do(t, "GET", base+"/bypassed", "Cache-Control", "no-store")
	// A request is counted as its handler returns, which may be after
	// its client has read the answer.
	waitFor(t, "four requests counted", func() bool { return n.loadReport().GetRequestsTotal() >= 4 })
	l := n.loadReport()
	if l.GetRequestsTotal() != 4 || l.GetOriginRequestsTotal() != 3 {
		t.Fatalf("load report: %d requests, %d origin requests; want 4 and 3 (a fill and two bypasses)", l.GetRequestsTotal(), l.GetOriginRequestsTotal())
	}
}

// An owner counts the requests it answers for relaying peers: with the
// client requests it did not relay, what its origin requests are counted
// against (cachectl's per-node offload).
func TestLoadReportCountsAnswersForPeers(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, b, e := startPair(t, origin.URL, noHotKeys)
	p := pathOwnedBy(t, e, "/peer/", "b")
	for range 3 {
		do(t, "GET", "http://"+a.ClientAddr().String()+p) // relayed to b
	}
	// Each node counts as its handler returns, which may be after the
	// answer has left.
	waitFor(t, "three requests counted at a, and answered at b", func() bool {
		return a.loadReport().GetRequestsTotal() >= 3 && b.loadReport().GetPeerAnswersTotal() >= 3
	})
	la, lb := a.loadReport(), b.loadReport()
	if la.GetRelayedTotal() != 3 || la.GetPeerAnswersTotal() != 0 {
		t.Fatalf("a relayed %d and answered %d for peers; want 3 and 0", la.GetRelayedTotal(), la.GetPeerAnswersTotal())
	}
	if lb.GetRequestsTotal() != 0 || lb.GetPeerAnswersTotal() != 3 || lb.GetOriginRequestsTotal() != 1 {
		t.Fatalf("b: %d client requests, %d answered for peers, %d origin requests; want 0, 3 and 1",
			lb.GetRequestsTotal(), lb.GetPeerAnswersTotal(), lb.GetOriginRequestsTotal())
	}
}
