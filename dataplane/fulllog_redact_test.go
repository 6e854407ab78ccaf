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
