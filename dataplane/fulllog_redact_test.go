package dataplane

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A full record's calls carry the error of a failed origin request; the
// error must not carry the query's credentials the path had redacted.
func TestAFullRecordRedactsTheQueryInErrorsAndReferer(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	originURL := origin.URL
	origin.Close() // the origin is down: fills fail
	_, n := startOne(t, originURL, noHotKeys, func(c *Config) { c.OpsTrustLoopback = true })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.OpsAddr().String()+"/log?"+url.Values{"full": {"1"}}.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("opening a full stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	r, _ := do(t, "GET", "http://"+n.ClientAddr().String()+"/dl/report.pdf?token=tok-s3cret&X-Amz-Signature=sig-s3cret",
		"Referer", "https://app.example/page?access_token=ref-s3cret")
	t.Logf("client: %d", r.StatusCode)
	if !sc.Scan() {
		t.Fatalf("no record: %v", sc.Err())
	}
	line := sc.Text()
	t.Logf("full record: %s", line)
	for _, s := range []string{"tok-s3cret", "sig-s3cret", "ref-s3cret"} {
		if strings.Contains(line, s) {
			t.Errorf("the full record carries %q", s)
		}
	}
}

// The node's own log lines redact a key's and an error's query
// credentials too: an origin request that fails is logged with its URL.
func TestTheNodesLogRedactsQueryCredentials(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	originURL := origin.URL
	origin.Close() // the origin is down: fills fail
	var logs syncBuffer
	_, n := startOne(t, originURL, noHotKeys, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	do(t, "GET", "http://"+n.ClientAddr().String()+"/dl/report.pdf?token=tok-s3cret&X-Amz-Signature=sig-s3cret")
	waitFor(t, "the failed origin request logged", func() bool { return strings.Contains(logs.String(), "origin request failed") })
	if strings.Contains(logs.String(), "tok-s3cret") || strings.Contains(logs.String(), "sig-s3cret") {
		t.Fatalf("the node's log carries a query credential: %s", logs.String())
	}
}

// A key a policy builds from a cookie or a credential field is logged
// as the policy shows it: the session or API key REDACTED.
func TestTheNodesLogShowsKeysAsThePolicyShowsThem(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	originURL := origin.URL
	origin.Close() // the origin is down: fills fail
	var logs syncBuffer
	_, n := startOne(t, originURL, noHotKeys, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "per-session", PathPrefix: "/me/", KeyTemplate: "$scheme$host$request_uri|$cookie_sid|$http_x_api_key"},
	}}); err != nil {
		t.Fatal(err)
	}
	do(t, "GET", "http://"+n.ClientAddr().String()+"/me/page", "Cookie", "sid=sess-s3cret", "X-Api-Key", "apikey-s3cret")
	waitFor(t, "the failed origin request logged", func() bool { return strings.Contains(logs.String(), "origin request failed") })
	if strings.Contains(logs.String(), "sess-s3cret") || strings.Contains(logs.String(), "apikey-s3cret") {
		t.Fatalf("the node's log carries a credential the key holds: %s", logs.String())
	}
}

// Credentials come in fields and query parameters of many names: Google's
// X-Goog-Api-Key, Azure's Ocp-Apim-Subscription-Key, GitLab's
// private_token, OAuth's client_secret. A full record, the access log and
// /inspect's variant values must show none of them to a read-only operator.
func TestRecordsRedactCredentialsOfUnusualNames(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{header: http.Header{"Vary": {"X-Goog-Api-Key"}}})
	defer origin.Close()
	var access syncBuffer
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) {
		c.OpsTrustLoopback = true
		c.AccessLog = &access
		c.AdminToken, c.OpsToken = "admin-s3cret", "read-only"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.OpsAddr().String()+"/log?"+url.Values{"full": {"1"}}.Encode(), nil)
	req.Header.Set("Authorization", "Bearer admin-s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("opening a full stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	secrets := []string{"goog-s3cret", "apim-s3cret", "fn-s3cret", "apikey-s3cret", "pat-s3cret", "client-s3cret", "oauth-s3cret", "auth-s3cret"}
	target := "http://" + n.ClientAddr().String() + "/api/v1/items"
	do(t, "GET", target, "X-Goog-Api-Key", "goog-s3cret", "Ocp-Apim-Subscription-Key", "apim-s3cret", "X-Functions-Key", "fn-s3cret", "Api-Key", "apikey-s3cret")
	do(t, "GET", target+"?private_token=pat-s3cret&client_secret=client-s3cret&oauth_signature=oauth-s3cret&auth_key=auth-s3cret&page=2")
	var lines []string
	for len(lines) < 2 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 2 {
		t.Fatalf("records: %q (%v)", lines, sc.Err())
	}
	line := strings.Join(lines, "\n")
	waitFor(t, "two access log lines", func() bool { return strings.Count(access.String(), "/api/v1/items") >= 2 })
	_, inspect := do(t, "GET", "http://"+n.OpsAddr().String()+"/inspect?"+url.Values{"url": {target}}.Encode(), "Authorization", "Bearer read-only")
	t.Logf("full records: %s\naccess log: %s\n/inspect: %s", line, access.String(), inspect)
	for what, text := range map[string]string{"the full record": line, "the access log": access.String(), "/inspect": inspect} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s carries %q", what, s)
			}
		}
	}
	if !strings.Contains(line, "page=2") {
		t.Errorf("the full record lost a plain parameter: %s", line)
	}
}
