package httpcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestStatusMembersAreStructuredFields(t *testing.T) {
	for _, tt := range []struct {
		m    StatusMember
		want string
	}{
		{StatusMember{Node: "node-1", Cache: "HIT", TTL: 90 * time.Second, HasTTL: true}, "node-1; hit; ttl=90"},
		{StatusMember{Node: "node-1", Cache: "STALE", TTL: -30 * time.Second, HasTTL: true}, "node-1; hit; ttl=-30; detail=stale"},
		{StatusMember{Node: "n", Cache: "MISS", Status: 200, Stored: true, TTL: time.Minute, HasTTL: true}, "n; fwd=uri-miss; fwd-status=200; ttl=60; stored"},
		{StatusMember{Node: "n", Cache: "REVALIDATED", Status: 304, Stored: true}, "n; fwd=stale; fwd-status=304; stored"},
		{StatusMember{Node: "n", Cache: "BYPASS", Status: 201}, "n; fwd=bypass; fwd-status=201"},
		{StatusMember{Node: "n", Cache: "MISS", Detail: "relayed"}, "n; fwd=uri-miss; detail=relayed"},
		{StatusMember{Node: "n", Cache: "MISS", Detail: ReasonVaryMiss}, "n; fwd=vary-miss; detail=vary-miss"},
		{StatusMember{Node: SFItem("7th node"), Cache: "PARTIAL", Key: `a"b\\c` + "\x01"}, `"7th node"; fwd=partial; key="a\"b\\\\c"`},
	} {
		got := tt.m.String()
		if got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.m, got, tt.want)
		}
		if _, ok := ParseList(got); !ok {
			t.Errorf("%q is not a Structured Fields List", got)
		}
	}
	if _, ok := ParseList("a; hit, b; fwd=uri-miss; fwd-status=200"); !ok {
		t.Error("a two-member list refused")
	}
	for _, bad := range []string{"", "a;", "a, ", "a; fwd=", `a; key="x`, "a b"} {
		if _, ok := ParseList(bad); ok {
			t.Errorf("ParseList(%q) accepted", bad)
		}
	}
}

func TestErrorTypes(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("get: %w", refused), "connection_refused"},
		{&net.DNSError{Err: "no such host", Name: "x"}, "dns_error"},
		{&net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}, "dns_timeout"},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), "http_response_timeout"},
		{io.ErrUnexpectedEOF, "http_response_incomplete"},
		{io.EOF, "connection_terminated"},
		{fmt.Errorf("reading: %w", ErrTransferCoding), "http_response_transfer_coding"},
		{errors.New("something else"), "proxy_internal_error"},
	} {
		if got := ErrorType(tt.err); got != tt.want {
			t.Errorf("ErrorType(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
	if h := ProxyStatus("node-1", "connection_refused", `dial "x"`); h != `node-1; error=connection_refused; details="dial \"x\""` {
		t.Errorf("ProxyStatus: %s", h)
	}
}

// TestDisconnected: an origin that closes or resets the connection before
// answering leaves the cache disconnected; one that breaks off mid-answer,
// refuses the connection or answers at all does not.
func TestDisconnected(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		switch r.URL.Path {
		case "/reset":
			c.(*net.TCPConn).SetLinger(0) // close with a RST
		case "/partial":
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Le")
			bw.Flush()
		}
		c.Close()
	}))
	defer srv.Close()
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	get := func(url string) error {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, tt := range []struct {
		url  string
		want bool
	}{
		{srv.URL + "/close", true},
		{srv.URL + "/reset", true},
		{srv.URL + "/partial", false},
		{srv.URL + "/ok", false},
		{refused.URL, false},
	} {
		if got := Disconnected(get(tt.url)); got != tt.want {
			t.Errorf("%s: Disconnected %v, want %v", tt.url, got, tt.want)
		}
	}
}

// What a client reads of an origin failure names no origin address.
func TestErrorDetailsHideTheOrigin(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "http://origin.internal:8080/a", Err: &net.OpError{Op: "dial", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	dns := &url.Error{Op: "Get", URL: "http://origin.internal/a", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "origin.internal"}}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refused, "dial: connect: connection refused"},
		{dns, "name lookup: no such host"},
		{errors.New(`read from http://origin.internal:8080: broken`), "origin request failed"},
		{errors.New("unexpected EOF"), "unexpected EOF"},
	} {
		if got := ErrorDetails(tc.err); got != tc.want {
			t.Errorf("ErrorDetails(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestReasonsAreTokens: every reason is sent as Cache-Status's detail
// bare, so each must be a Structured Fields Token, and each is named once.
func TestReasonsAreTokens(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons {
		if SFItem(r) != r || seen[r] {
			t.Errorf("reason %q: not a token, or listed twice", r)
		}
		seen[r] = true
		m := StatusMember{Node: "n", Cache: CacheMiss, Detail: r}
		if ms, ok := ParseList(m.String()); !ok || ms[0].Params["detail"] != r {
			t.Errorf("Cache-Status %q does not parse back to detail %q", m.String(), r)
		}
	}
}
