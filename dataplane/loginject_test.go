package dataplane

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// The client port refuses CR, LF and other ASCII controls in a request
// head, but not UTF-8: a User-Agent, Referer or any field may carry
// U+0085 (NEL), U+2028 (line separator), which log pipelines that split
// lines by Unicode rules (Python's splitlines, Java's \R) take for a line
// break, C1 controls (U+009B is a terminal's CSI) and bidirectional
// overrides. Written as they came, a client forges an access-log line, or
// rewrites what an operator's terminal shows of one. The access log and
// every log stream format (JSON, NCSA, full records) show such characters
// escaped, as nginx escapes the bytes it would not print.
func TestLogsEscapeLineBreakingAndControlCharacters(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	var access syncBuffer
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.OpsTrustLoopback = true; c.AccessLog = &access })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(q url.Values) *bufio.Scanner {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.OpsAddr().String()+"/log?"+q.Encode(), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("opening a stream %v: %v %v", q, err, resp)
		}
		t.Cleanup(func() { resp.Body.Close() })
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		return sc
	}
	streams := map[string]*bufio.Scanner{"ncsa": open(url.Values{"format": {"ncsa"}}), "json": open(url.Values{}), "full": open(url.Values{"full": {"1"}})}
	forged := `127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] "GET /admin/keys HTTP/1.1" 200 1 "-" "-"`
	do(t, "GET", "http://"+n.ClientAddr().String()+"/img/a.png",
		"User-Agent", "Mozilla/5.0\u0085"+forged,
		"Referer", "https://shop.example/\u2028"+forged,
		"X-Note", "\u009b2J\u202egnp.exe")
	waitFor(t, "an access log line", func() bool { return strings.Contains(access.String(), "a.png") })
	lines := map[string]string{"the access log": access.String()}
	for name, sc := range streams {
		if !sc.Scan() {
			t.Fatalf("no %s record: %v", name, sc.Err())
		}
		lines[name+" stream"] = sc.Text()
	}
	for name, line := range lines {
		t.Logf("%s: %s", name, line)
		for _, c := range []string{"\u0085", "\u2028", "\u009b", "\u202e"} {
			if strings.Contains(line, c) {
				t.Errorf("%s carries %U as the client sent it", name, []rune(c)[0])
			}
		}
	}
}

// rawGet sends a GET whose head is written as given (Go's client refuses
// a Host that is not ASCII; the client port takes one) and reads its
// answer.
func rawGet(t *testing.T, addr, path, host string, fields ...string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	for i := 0; i+1 < len(fields); i += 2 {
		head += fields[i] + ": " + fields[i+1] + "\r\n"
	}
	io.WriteString(c, head+"\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// A cache key holds, for a policy keying on a request field and for a
// variant, request field values as the client sent them: UTF-8 included
// (a Host holding them is refused). /stats' hot keys, /inspect's variant
// values and the node's own log lines (JSON: slog escapes no C1 control)
// show them to operators, and must show line breaks, C1 controls and
// overrides escaped as the access log does.
func TestOpsViewsAndNodeLogsEscapeWhatAClientSentInAKey(t *testing.T) {
	bad := []string{"\u0085", "\u009b", "\u202e"}
	check := func(what, text string) {
		t.Helper()
		for _, c := range bad {
			if strings.Contains(text, c) {
				t.Errorf("%s carries %U as the client sent it: %q", what, []rune(c)[0], text)
			}
		}
	}
	origin := httptest.NewServer(&testOrigin{header: http.Header{"Vary": {"X-Note"}}})
	defer origin.Close()
	// Under /noted/ the key holds X-Note's value too.
	keyed := &pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "noted", PathPrefix: "/noted/", KeyTemplate: "$scheme$host$request_uri|$http_x_note"},
	}}
	_, n := startOne(t, origin.URL, func(c *Config) { c.OpsTrustLoopback = true; c.HotThreshold = 1 })
	if err := n.ApplyPolicies(keyed); err != nil {
		t.Fatal(err)
	}
	host, note := "shop.example", "\u009b2J\u0085forged\u202e"
	for range 20 {
		rawGet(t, n.ClientAddr().String(), "/hot/x", host, "X-Note", note)   // a variant
		rawGet(t, n.ClientAddr().String(), "/noted/x", host, "X-Note", note) // a key
	}
	_, stats := do(t, "GET", "http://"+n.OpsAddr().String()+"/stats")
	if !strings.Contains(stats, "noted/x") {
		t.Fatalf("/stats lists no hot key: %s", stats)
	}
	check("/stats", stats)
	_, inspect := do(t, "GET", "http://"+n.OpsAddr().String()+"/inspect?"+url.Values{"url": {"http://" + host + "/hot/x"}}.Encode())
	if !strings.Contains(inspect, "variant") {
		t.Fatalf("/inspect lists no variant: %s", inspect)
	}
	check("/inspect's objects", inspect[strings.Index(inspect, `"objects"`):]) // its url and key are the operator's

	down := httptest.NewServer(&testOrigin{})
	downURL := down.URL
	down.Close() // fills fail, and are logged with their key
	var logs syncBuffer
	_, d := startOne(t, downURL, noHotKeys, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	if err := d.ApplyPolicies(keyed); err != nil {
		t.Fatal(err)
	}
	rawGet(t, d.ClientAddr().String(), "/noted/down", host, "X-Note", note)
	waitFor(t, "the failed origin request logged", func() bool { return strings.Contains(logs.String(), "origin request failed") })
	check("the node's log", logs.String())
}
