package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/admin"
)

// TestFullLogStream: a full log stream with a filter carries only the
// records that match, each with the request's and the answer's fields
// (credentials redacted), its request id, its reason, and the requests
// made for it: the relay to the owner, and the owner's origin fill inside
// it. A plain stream open at the same time gets the same records without
// the full part, and a filter that cannot parse is refused with the place
// of the mistake.
func TestFullLogStream(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	a, _, e := startPair(t, origin.URL, noHotKeys, func(c *Config) { c.OpsTrustLoopback = true })
	ops := "http://" + a.OpsAddr().String() + "/log?"

	resp, body := do(t, "GET", ops+url.Values{"q": {"status >= 200 and route === relayed"}}.Encode())
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "at 27:") {
		t.Fatalf("a filter with a typo: %d %s; want 400 naming where", resp.StatusCode, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(q url.Values) *bufio.Scanner {
		req, _ := http.NewRequestWithContext(ctx, "GET", ops+q.Encode(), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("opening %v: %v %v", q, err, resp)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return bufio.NewScanner(resp.Body)
	}
	relayed := pathOwnedBy(t, e, "/fl/x/", "b")
	other := pathOwnedBy(t, e, "/fl/y/", "b")
	local := pathOwnedBy(t, e, "/fl/", "a")
	full := open(url.Values{"full": {"1"}, "q": {`route == relayed and req.X-Test == "full" and reason == uri-miss`}})
	plain := open(url.Values{"q": {`path == "` + relayed + `"`}})

	client := "http://" + a.ClientAddr().String()
	// A local miss, and a relayed one of another X-Test, do not pass the
	// full stream's filter; the last request passes both.
	do(t, "GET", client+local, "X-Test", "full")
	do(t, "GET", client+other, "X-Test", "other")
	resp, _ = do(t, "GET", client+relayed, "X-Test", "full", "Cookie", "session=s3cret")
	id := resp.Header.Get("X-Request-Id")
	if id == "" || !strings.Contains(resp.Header.Get("Cache-Status"), "detail=uri-miss") {
		t.Fatalf("the relayed miss: X-Request-Id %q, Cache-Status %q", id, resp.Header.Get("Cache-Status"))
	}

	var rec admin.LogRecord
	if !full.Scan() || json.Unmarshal(full.Bytes(), &rec) != nil {
		t.Fatalf("full stream: %q %v", full.Text(), full.Err())
	}
	if rec.RequestID != id || rec.Path != relayed || rec.Route != "relayed" || rec.Reason != "uri-miss" || rec.Full == nil {
		t.Fatalf("full stream's first record %s; want the relayed miss, id %s, full", full.Text(), id)
	}
	d := rec.Full
	if d.Request["Cookie"][0] != "REDACTED" || d.Request["X-Test"][0] != "full" || d.Request["X-Request-Id"][0] != id ||
		!strings.Contains(d.Response["Cache-Status"][0], "detail=uri-miss") {
		t.Fatalf("fields: request %v, response %v", d.Request, d.Response)
	}
	if len(d.Calls) != 1 || d.Calls[0].Kind != "peer" || d.Calls[0].Node != "b" || d.Calls[0].Status != 200 || d.Calls[0].Stages == nil ||
		len(d.Calls[0].Calls) != 1 || d.Calls[0].Calls[0].Kind != "origin" || d.Calls[0].Calls[0].Status != 200 {
		t.Fatalf("calls %+v; want the relay to b, and b's origin fill in it", d.Calls)
	}
	if strings.Contains(full.Text(), "s3cret") {
		t.Fatalf("a cookie's value in a full record: %s", full.Text())
	}
	if !plain.Scan() || !strings.Contains(plain.Text(), `"request_id":"`+id+`"`) || strings.Contains(plain.Text(), `"full"`) {
		t.Fatalf("plain stream's first record %s; want the same request, without its full part", plain.Text())
	}
}
