package dataplane

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// /drain and /debug/pprof/ serve a caller off loopback only with the
// admin token; the probes' and the scraper's paths stay open.
func TestOpsListenerGuardsWhatChangesOrReadsTheNode(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL, func(c *Config) { c.AdminToken = "s3cret" })
	ops := n.opsHandler()
	serve := func(path, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil) // from 192.0.2.1, not loopback
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		ops.ServeHTTP(w, r)
		return w
	}
	for _, path := range []string{"/drain", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol"} {
		if w := serve(path, ""); w.Code != http.StatusForbidden {
			t.Fatalf("%s off loopback without a token: %d, want 403", path, w.Code)
		}
		if w := serve(path, "Bearer wrong"); w.Code != http.StatusUnauthorized {
			t.Fatalf("%s with a wrong token: %d, want 401", path, w.Code)
		}
	}
	if w := serve("/debug/pprof/cmdline", "Bearer s3cret"); w.Code != 200 {
		t.Fatalf("cmdline with the admin token: %d", w.Code)
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if w := serve(path, ""); w.Code != 200 {
			t.Fatalf("%s off loopback: %d %s, want it open", path, w.Code, w.Body)
		}
	}
	if got := metricValue(t, n, "shardcache_ops_refused_total", `reason="no_token"`); got != 4 {
		t.Fatalf("refused without a token: %v, want 4", got)
	}
	if n.front.Draining() {
		t.Fatal("a refused /drain drained the node")
	}
}

func TestRedactArgsHidesSecretFlagValues(t *testing.T) {
	got := redactArgs([]string{"shardcache", "node", "--admin-token", "a1", "--join-token=j1", "--ca-key", "k.pem",
		"--join-token-file", "/run/secrets/join", "--id", "node-1", "-token", "t1"})
	want := []string{"shardcache", "node", "--admin-token", "REDACTED", "--join-token=REDACTED", "--ca-key", "k.pem",
		"--join-token-file", "/run/secrets/join", "--id", "node-1", "-token", "REDACTED"}
	if !slices.Equal(got, want) {
		t.Fatalf("redactArgs:\n got %v\nwant %v", got, want)
	}
	if strings.Contains(strings.Join(got, " "), "j1") {
		t.Fatal("a secret survived")
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
	l := n.loadReport()
	if l.GetRequestsTotal() != 4 || l.GetOriginRequestsTotal() != 3 {
		t.Fatalf("load report: %d requests, %d origin requests; want 4 and 3 (a fill and two bypasses)", l.GetRequestsTotal(), l.GetOriginRequestsTotal())
	}
}
