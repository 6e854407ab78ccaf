package dataplane

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A read-only ops token must not see other clients' credentials: a
// response that varies by Cookie is stored under a variant key holding the
// client's cookie, and /inspect lists each variant's field values.
func TestInspectRedactsOtherClientsCookies(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{header: http.Header{"Vary": {"Cookie"}}})
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.AdminToken = "admin-s3cret"; c.OpsToken = "read-only" })
	client := "http://" + n.ClientAddr().String()
	resp, _ := do(t, "GET", client+"/account/home", "Cookie", "session=victim-session-s3cret")
	t.Logf("client GET: %d X-Cache=%s", resp.StatusCode, resp.Header.Get("X-Cache"))
	resp, _ = do(t, "GET", client+"/account/home", "Cookie", "session=victim-session-s3cret")
	t.Logf("client GET again: %d X-Cache=%s", resp.StatusCode, resp.Header.Get("X-Cache"))

	target := "http://" + n.ClientAddr().String() + "/account/home"
	r, body := do(t, "GET", "http://"+n.OpsAddr().String()+"/inspect?"+url.Values{"url": {target}}.Encode(), "Authorization", "Bearer read-only")
	t.Logf("/inspect with the read-only token: %d %s", r.StatusCode, body)
	if strings.Contains(body, "victim-session-s3cret") {
		t.Fatalf("/inspect shows a client's Cookie value to the read-only ops token")
	}
}

// /stats lists the hottest cache keys; a key holds the query, and its
// credentials must be redacted as the access log redacts them.
func TestStatsRedactsHotKeysQueryTokens(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL, func(c *Config) { c.AdminToken = "admin-s3cret"; c.OpsToken = "read-only"; c.HotThreshold = 1 })
	client := "http://" + n.ClientAddr().String()
	for range 20 {
		do(t, "GET", client+"/dl/file?X-Amz-Signature=sig-s3cret&token=tok-s3cret")
	}
	r, body := do(t, "GET", "http://"+n.OpsAddr().String()+"/stats", "Authorization", "Bearer read-only")
	i := strings.Index(body, "hot")
	t.Logf("/stats with the read-only token: %d ...%s", r.StatusCode, body[max(i, 0):min(len(body), max(i, 0)+300)])
	if strings.Contains(body, "tok-s3cret") || strings.Contains(body, "sig-s3cret") {
		t.Fatalf("/stats hot keys carry a query's credential values")
	}
}

// The access log redacts credentials in the path and key; the Referer
// carries the previous page's URL, with its tokens.
func TestTheAccessLogRedactsTheReferersTokens(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	var buf syncBuffer
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) {
		c.AccessLog = &buf
	})
	client := "http://" + n.ClientAddr().String()
	do(t, "GET", client+"/img/logo.png?token=path-s3cret", "Referer", "https://app.example/reset?token=ref-s3cret&code=oauth-s3cret")
	waitFor(t, "an access log line", func() bool { return strings.Contains(buf.String(), "logo.png") })
	t.Logf("access log: %s", buf.String())
	if strings.Contains(buf.String(), "path-s3cret") {
		t.Fatalf("path token in the access log")
	}
	if strings.Contains(buf.String(), "ref-s3cret") || strings.Contains(buf.String(), "oauth-s3cret") {
		t.Fatalf("a Referer's token in the access log")
	}
}

var _ = slog.LevelInfo
var _ = bytes.MinRead

// A policy may key on a request field or a cookie ($http_x_api_key,
// $cookie_sid: a cache per API key or per session); the key then holds the
// client's credential, and the access log, the log streams and /stats' hot
// keys show keys to operators with read-only rights.
func TestKeysShowNoCredentialAPolicyKeysOn(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	var access syncBuffer
	_, n := startOne(t, origin.URL, func(c *Config) {
		c.AccessLog, c.HotThreshold = &access, 1
		c.AdminToken, c.OpsToken = "admin-s3cret", "read-only"
	})
	set := &pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "per-client", PathPrefix: "/api/", KeyTemplate: "$scheme$host$request_uri|$http_x_api_key|$cookie_sid|$http_accept"},
	}}
	if err := n.ApplyPolicies(set); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		do(t, "GET", "http://"+n.ClientAddr().String()+"/api/items", "X-Api-Key", "apikey-s3cret", "Cookie", "sid=sess-s3cret", "Accept", "application/json")
	}
	_, stats := do(t, "GET", "http://"+n.OpsAddr().String()+"/stats", "Authorization", "Bearer read-only")
	if !strings.Contains(stats, "/api/items") {
		t.Fatalf("/stats lists no hot key: %s", stats)
	}
	waitFor(t, "access log lines", func() bool { return strings.Count(access.String(), "/api/items") >= 20 })
	for what, text := range map[string]string{"/stats": stats, "the access log": access.String()} {
		if strings.Contains(text, "apikey-s3cret") || strings.Contains(text, "sess-s3cret") {
			t.Errorf("%s shows a credential the key holds", what)
		}
		if !strings.Contains(text, "application/json") {
			t.Errorf("%s lost the key's plain part", what)
		}
	}
	t.Logf("/stats: %.400s", stats[strings.Index(stats, "hot_keys"):])
}
