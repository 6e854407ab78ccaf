package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/clientconn"
	"github.com/shardcache/shardcache/dataplane/internal/rawio"
)

// serve starts a server of h on a loopback listener and returns its
// address; it is shut down when the test ends.
func serve(t *testing.T, h http.Handler, edit ...func(*Config)) (string, *Server) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Handler: h}
	for _, e := range edit {
		e(&cfg)
	}
	s := New(cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return l.Addr().String(), s
}

// exchange writes req on a new connection, closes its sending side, and
// reads until the server closes it (or 5 s pass).
func exchange(t *testing.T, addr, req string) string { return dial(t, addr, req, true) }

// exchangeOpen is exchange with the sending side left open.
func exchangeOpen(t *testing.T, addr, req string) string { return dial(t, addr, req, false) }

func dial(t *testing.T, addr, req string, halfClose bool) string {
	t.Helper()
	b, _ := dialRead(t, addr, req, halfClose)
	return b
}

// dialRead is dial that also returns how the reading ended.
func dialRead(t *testing.T, addr, req string, halfClose bool) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, req)
	if halfClose {
		c.(*net.TCPConn).CloseWrite()
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "hello "+r.Method+" "+r.Host+" "+r.URL.Path)
})

func TestStrictParsingRefusesWhatAnotherParserCouldReadOtherwise(t *testing.T) {
	addr, _ := serve(t, hello)
	for _, tc := range []struct{ name, req, status string }{
		{"bare LF", "GET / HTTP/1.1\nHost: x\n\n", "400"},
		{"bare LF in a field line", "GET / HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n", "400"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", "400"},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", "400"},
		{"CR in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", "400"},
		{"space before the colon", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc", "400"},
		{"a name of no token", "GET / HTTP/1.1\r\nHost: x\r\nX(A): 1\r\n\r\n", "400"},
		{"a line without a colon", "GET / HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", "400"},
		{"two Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "400"},
		{"a Content-Length list of two", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\nab", "400"},
		{"a signed Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\na", "400"},
		{"Transfer-Encoding gzip", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "501"},
		{"two Transfer-Encodings", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "501"},
		{"HTTP/1.0 with Transfer-Encoding", "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", "400"},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", "400"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400"},
		{"a Host with a slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", "400"},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", "505"},
		{"no version", "GET /\r\nHost: x\r\n\r\n", "400"},
		{"a lower-case version", "GET / http/1.1\r\nHost: x\r\n\r\n", "400"},
		{"a control character in the target", "GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"a method of no token", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"a target that is no URI", "GET http://[::1 HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"an unknown expectation", "GET / HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", "417"},
		{"a head too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", "431"},
		{"a URL too large", "GET /" + strings.Repeat("a", 100<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", "431"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := exchange(t, addr, tc.req+"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
			if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") {
				t.Fatalf("answer %q, want %s", firstLine(got), tc.status)
			}
			if !strings.Contains(got, "\r\nConnection: close\r\n") || strings.Contains(got, "/after") {
				t.Fatalf("answer %q: want the connection closed after the refusal, nothing after it read", got)
			}
		})
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

func TestRequestsAsNetHTTPHasThem(t *testing.T) {
	var got *http.Request
	var body string
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, body = r, string(b)
	}))
	for _, tc := range []struct{ req, method, uri, host, path, query, body string }{
		{"GET /a/b?x=1 HTTP/1.1\r\nhost: example.com\r\nx-FOO-bar: v\r\n\r\n", "GET", "/a/b?x=1", "example.com", "/a/b", "x=1", ""},
		{"GET http://other.example/p%20q HTTP/1.1\r\nHost: example.com\r\n\r\n", "GET", "http://other.example/p%20q", "other.example", "/p q", "", ""},
		{"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", "POST", "/up", "h", "/up", "", "hello"},
		{"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\nContent-Length: 99\r\n\r\n3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n", "POST", "/up", "h", "/up", "", "hello"},
		{"\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", "OPTIONS", "*", "h", "*", "", ""},
		{"GET //double/slash HTTP/1.0\r\n\r\n", "GET", "//double/slash", "", "//double/slash", "", ""},
	} {
		got = nil
		end := strings.Index(tc.req, " HTTP/1.")
		end += strings.Index(tc.req[end:], "\r\n\r\n")
		resp := exchange(t, addr, tc.req[:end]+"\r\nConnection: close"+tc.req[end:])
		if !strings.HasPrefix(resp, "HTTP/1.1 200 ") || got == nil {
			t.Fatalf("%q: answer %q", tc.req, resp)
		}
		if got.Method != tc.method || got.RequestURI != tc.uri || got.Host != tc.host || got.URL.Path != tc.path || got.URL.RawQuery != tc.query || body != tc.body {
			t.Errorf("%q: got %s %s host %q path %q query %q body %q", tc.req, got.Method, got.RequestURI, got.Host, got.URL.Path, got.URL.RawQuery, body)
		}
		if _, ok := got.Header["Host"]; ok {
			t.Errorf("%q: Host in the header map", tc.req)
		}
	}
	exchange(t, addr, "GET / HTTP/1.1\r\nHost: h\r\nx-FOO-bar: v\r\nAccept: a\r\naccept: b\r\nConnection: close\r\n\r\n")
	if v := got.Header["X-Foo-Bar"]; len(v) != 1 || v[0] != "v" {
		t.Errorf("X-Foo-Bar %q: want the name canonical", v)
	}
	if v := got.Header["Accept"]; len(v) != 2 || v[0] != "a" || v[1] != "b" {
		t.Errorf("Accept %q: want both lines in order", v)
	}
}

func TestKeepAliveAndPipelining(t *testing.T) {
	var accepted atomic.Int32
	addr, _ := serve(t, hello, func(c *Config) {
		c.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { accepted.Add(1); return ctx }
	})
	// Three requests in one write: three answers, in order, on one
	// connection.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	for i, want := range []string{"hello GET x /1", "", "hello GET x /3"} {
		method := "GET"
		if i == 1 {
			method = "HEAD"
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != want || resp.StatusCode != 200 || resp.Header.Get("Date") == "" {
			t.Errorf("answer %d: %d %q (Date %q), want %q", i+1, resp.StatusCode, b, resp.Header.Get("Date"), want)
		}
		if i == 1 && resp.ContentLength != int64(len("hello HEAD x /2")) {
			t.Errorf("HEAD: Content-Length %d, want the length a GET would have", resp.ContentLength)
		}
	}
	// net/http's client keeps its connection.
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	before := accepted.Load()
	for i := range 5 {
		resp, err := client.Get("http://" + addr + fmt.Sprintf("/k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := accepted.Load() - before; n != 1 {
		t.Errorf("5 requests took %d connections, want 1", n)
	}
}

func TestFraming(t *testing.T) {
	big := strings.Repeat("b", 3*stageMax)
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/streamed": // no length, more than is held: chunked
			io.WriteString(w, big[:stageMax])
			io.WriteString(w, big[stageMax:])
		case "/flushed":
			io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			io.WriteString(w, "b")
		case "/204":
			w.WriteHeader(204)
			if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
				panic("a 204 took a body")
			}
		case "/304":
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(304)
		case "/over":
			w.Header().Set("Content-Length", "2")
			if n, err := io.WriteString(w, "abc"); n != 2 || !errors.Is(err, http.ErrContentLength) {
				panic(fmt.Sprint("wrote ", n, err))
			}
		case "/short":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		case "/switched": // as an origin that switched protocols unasked
			w.Header().Set("Upgrade", "h2c")
			w.WriteHeader(101)
			io.WriteString(w, "tunnelled")
		case "/early-hints":
			w.Header().Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(103)
			w.Header().Del("Link")
			io.WriteString(w, "ok")
		default:
			io.WriteString(w, "small")
		}
	}))
	for _, tc := range []struct{ req, want string }{
		{"GET /small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "Content-Length: 5\r\n"},
		{"GET /streamed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "Transfer-Encoding: chunked\r\n"},
		{"GET /flushed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "\r\n\r\n1\r\na\r\n1\r\nb\r\n0\r\n\r\n"},
		{"GET /streamed HTTP/1.0\r\n\r\n", "Connection: close\r\n"},
		{"GET /small HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "Connection: keep-alive\r\n"},
		{"GET /204 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 204 No Content\r\n"},
		{"GET /304 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "Content-Length: 10\r\nConnection: close\r\n\r\n"},
		{"GET /over HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "Content-Length: 2\r\nConnection: close\r\n\r\nab"},
		{"GET /early-hints HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n"},
	} {
		got := exchange(t, addr, tc.req)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%q: answer %q, want it to hold %q", firstLine(tc.req), got, tc.want)
		}
	}
	if got := exchange(t, addr, "GET /streamed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasSuffix(got, "\r\n0\r\n\r\n") {
		t.Errorf("a chunked answer ends %q", got[max(0, len(got)-16):])
	}
	if got := exchange(t, addr, "GET /204 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); strings.Contains(got, "Content-Length") || strings.HasSuffix(got, "x") {
		t.Errorf("204: %q", got)
	}
	// A 101: this server switches to no protocol, and a proxy before it
	// would tunnel what follows. A 502, and the connection closes: the
	// pipelined request after it is not served.
	got := exchange(t, addr, "GET /switched HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 502 ") || !strings.Contains(got, "Connection: close\r\n") || strings.Count(got, "HTTP/1.1 ") != 1 {
		t.Errorf("a 101: %q, want one 502 and the connection closed", got)
	}
	// A body shorter than its length: the connection closes after it,
	// though the request asked to keep it.
	if got := exchange(t, addr, "GET /short HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasSuffix(got, "\r\n\r\nabc") {
		t.Errorf("short body: %q, want it cut and the connection closed", got)
	}
}

func TestBodies(t *testing.T) {
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(400)
				io.WriteString(w, err.Error())
				return
			}
			w.Write(b)
		default: // the body left unread
			io.WriteString(w, "unread")
		}
	}))
	// Expect: 100-continue: the continue comes when the body is asked for.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	if line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, want 100 Continue", line)
	}
	br.ReadString('\n')
	io.WriteString(c, "ping")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ping" {
		t.Errorf("echo %q", b)
	}
	// A small unread body is read and dropped: the next request on the
	// connection is served.
	got := exchange(t, addr, "POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if strings.Count(got, "HTTP/1.1 200") != 2 {
		t.Errorf("after an unread body: %q, want two answers", got)
	}
	// Unanswered Expect: the answer comes without 100 Continue, and the
	// connection closes (the client may or may not send the body).
	got = exchange(t, addr, "POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
	if strings.Contains(got, "100 Continue") || !strings.Contains(got, "Connection: close") && !strings.HasSuffix(got, "unread") {
		t.Errorf("unread body after Expect: %q", got)
	}
	// A malformed chunk: the handler sees an error, and nothing after it
	// is read as a request.
	got = exchange(t, addr, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 400") || strings.Count(got, "HTTP/1.1") != 1 {
		t.Errorf("malformed chunk: %q", got)
	}
	// Chunk framing lines end with CRLF and hold no control byte but a
	// tab: a server or proxy before this one could end them elsewhere and
	// frame another body (net/http refuses these too).
	for name, chunks := range map[string]string{
		"bare LF after the size":          "3\nabc\r\n0\r\n\r\n",
		"bare LF after the data":          "3\r\nabc\n0\r\n\r\n",
		"bare LF ending the trailer":      "3\r\nabc\r\n0\r\n\n",
		"CR in an extension":              "3;a\rb\r\nabc\r\n0\r\n\r\n",
		"NUL in an extension":             "3;\x00\r\nabc\r\n0\r\n\r\n",
		"control byte in a trailer":       "3\r\nabc\r\n0\r\nX: \x01\r\n\r\n",
		"bare CR at the end of a trailer": "3\r\nabc\r\n0\r\nX: y\r\r\n\r\n",
	} {
		got = exchange(t, addr, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+chunks+"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 400") || strings.Count(got, "HTTP/1.1") != 1 {
			t.Errorf("%s: %q, want one 400", name, got)
		}
	}
	// A tab in an extension is whitespace, allowed.
	got = exchange(t, addr, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\t;a=b\r\nabc\r\n0\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200") || !strings.HasSuffix(got, "abc") {
		t.Errorf("a chunk extension after a tab: %q", got)
	}
	// A body the client stops sending: the connection ends with it.
	got = exchange(t, addr, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	if got != "" && !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Errorf("a cut body: %q", got)
	}
}

func TestTimeouts(t *testing.T) {
	addr, _ := serve(t, hello, func(c *Config) {
		c.HeaderTimeout = 200 * time.Millisecond
		c.IdleTimeout = 200 * time.Millisecond
	})
	// A head that never ends: 408, then the close.
	if got := exchangeOpen(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n"); !strings.HasPrefix(got, "HTTP/1.1 408") {
		t.Errorf("slow head: %q, want 408", firstLine(got))
	}
	// What cannot start a request is refused at once (a 400, not the
	// head's 408): a TLS ClientHello (a client trying https first), whose
	// bytes hold no empty line.
	if got := exchangeOpen(t, addr, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"); !strings.HasPrefix(got, "HTTP/1.1 400") ||
		!strings.Contains(got, "TLS handshake") {
		t.Errorf("a TLS handshake: %q, want a 400 naming it", got)
	}
	// A connection that sends nothing is closed without an answer.
	if got := exchangeOpen(t, addr, ""); got != "" {
		t.Errorf("silent connection: %q", got)
	}
	// A kept-alive connection with nothing more to send is closed after
	// its idle time; the answer before it is whole.
	if got := exchangeOpen(t, addr, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasSuffix(got, "hello GET x /a") {
		t.Errorf("idle: %q", got)
	}
}

func TestShutdownLetsTheRequestServedEnd(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	addr, s := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	}))
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(idle, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busy.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The idle connection is closed at once.
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("idle connection: read %d, %v; want it closed", n, err)
	}
	close(release)
	got, _ := io.ReadAll(busy)
	if !strings.Contains(string(got), "Connection: close\r\n") || !strings.HasSuffix(string(got), "done") {
		t.Errorf("the request served through the shutdown: %q", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestPanicsAndAbortsCutTheAnswer(t *testing.T) {
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 2*stageMax))
		w.(http.Flusher).Flush()
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic("boom")
	}), func(c *Config) { c.Logger = slog.New(slog.DiscardHandler) })
	for _, p := range []string{"/abort", "/panic"} {
		got := exchange(t, addr, "GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200") || strings.HasSuffix(got, "0\r\n\r\n") {
			t.Errorf("%s: the answer ended cleanly (%d bytes)", p, len(got))
		}
	}
}

// An HTTP/1.0 answer of no length ends at the close: a handler's panic
// resets the connection, so the client cannot take what came for whole.
func TestAPanicResetsAnHTTP10AnswerOfNoLength(t *testing.T) {
	addr, _ := serve(t, panicking, func(c *Config) { c.Logger = slog.New(slog.DiscardHandler) })
	wantReset(t, addr)
}

// panicking starts an answer of no length, then panics.
var panicking = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, strings.Repeat("x", 2*stageMax))
	w.(http.Flusher).Flush()
	panic("boom")
})

// wantReset asks addr for an HTTP/1.0 answer and wants the connection
// reset, not closed.
func wantReset(t *testing.T, addr string) {
	t.Helper()
	got, err := dialRead(t, addr, "GET /panic HTTP/1.0\r\n\r\n", false)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after %d bytes: %v, want the connection reset", len(got), err)
	}
}

func TestAFileGoesOutWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	content := strings.Repeat("0123456789", 100<<10)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		w.Header().Set("Content-Length", fmt.Sprint(len(content)-10))
		io.Copy(w, &io.LimitedReader{R: f, N: int64(len(content))}) // more than declared: cut at it
	}))
	resp, err := http.Get("http://" + addr + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != content[:len(content)-10] {
		t.Errorf("read %d bytes (%v), want %d", len(b), err, len(content)-10)
	}
}

// A body copied from a stream goes out as it comes: the client has the
// first part before the handler has the rest.
func TestAStreamGoesOutAsItComes(t *testing.T) {
	pr, pw := io.Pipe()
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/length" {
			w.Header().Set("Content-Length", "10")
		}
		io.Copy(w, pr)
	}))
	for _, path := range []string{"/chunked", "/length"} {
		go io.WriteString(pw, "first")
		resp, err := http.Get("http://" + addr + path) // returns with the header
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
			t.Fatalf("%s: first part %q, %v", path, first, err)
		}
		io.WriteString(pw, "later")
		if path == "/chunked" {
			pw.Close()
			pr, pw = io.Pipe()
		}
		rest, err := io.ReadAll(resp.Body)
		if err != nil || string(rest) != "later" {
			t.Errorf("%s: the rest %q, %v", path, rest, err)
		}
		resp.Body.Close()
	}
}

// Answer sends a whole answer from a serialised head: the header map's
// fields first, then the head, its length from the body, and nothing
// when the answer has begun; a HEAD gets the length and no body.
func TestAnswerFromASerialisedHead(t *testing.T) {
	type answerer interface {
		Answer(status int, head, body []byte) bool
	}
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := w.(answerer)
		w.Header().Set("X-Request-Id", "r1")
		w.Header().Set("Content-Length", "999") // the body's own length wins
		if r.URL.Path == "/begun" {
			io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			if a.Answer(200, []byte("X-Late: 1\r\n"), []byte("late")) {
				panic("Answer after the answer began")
			}
			return
		}
		head := "Content-Type: text/plain\r\nAge: 3\r\n"
		if r.URL.Path == "/dated" {
			head = "Date: Mon, 30 Nov 2026 12:00:00 GMT\r\n" + head
		}
		if !a.Answer(200, []byte(head), []byte("stored body")) {
			panic("Answer refused")
		}
	}))
	got := exchange(t, addr, "GET /hit HTTP/1.1\r\nHost: x\r\n\r\nGET /hit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	one := "HTTP/1.1 200 OK\r\nDate: "
	if strings.Count(got, one) != 2 || strings.Count(got, "Content-Length: 11\r\n") != 2 || strings.Contains(got, "999") ||
		!strings.Contains(got, "X-Request-Id: r1\r\nContent-Type: text/plain\r\nAge: 3\r\nContent-Length: 11\r\n") ||
		!strings.HasSuffix(got, "Connection: close\r\n\r\nstored body") {
		t.Fatalf("two pipelined answers: %q", got)
	}
	if got := exchange(t, addr, "HEAD /hit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.Contains(got, "Content-Length: 11\r\n") || strings.HasSuffix(got, "stored body") {
		t.Fatalf("HEAD: %q", got)
	}
	if got := exchange(t, addr, "GET /dated HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); strings.Count(got, "Date: ") != 1 || !strings.Contains(got, "Date: Mon, 30 Nov 2026 12:00:00 GMT\r\n") {
		t.Fatalf("a head with its own Date: %q, want that Date alone", got)
	}
	if got := exchange(t, addr, "GET /begun HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); strings.Contains(got, "late") || strings.Contains(got, "X-Late") {
		t.Fatalf("an Answer after the answer began was written: %q", got)
	}
}

// The client port's connections come through the node's listeners
// (rawio, then clientconn), not as a bare TCP connection: a handler's
// panic resets them too.
func TestAPanicResetsAConnectionOfTheNodesListeners(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Handler: panicking, Logger: slog.New(slog.DiscardHandler), ConnContext: clientconn.ConnContext})
	done := make(chan error, 1)
	go func() { done <- s.Serve(clientconn.NewListener(rawio.Listener{Listener: l}, clientconn.Config{})) }()
	t.Cleanup(func() {
		s.Close()
		<-done
	})
	wantReset(t, l.Addr().String())
}
