package dataplane

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
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
