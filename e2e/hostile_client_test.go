package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/ring"
)

// hostileOrigin answers the paths the hostile-client test attacks, and
// records the header of every request it gets.
type hostileOrigin struct {
	mu      sync.Mutex
	seen    map[string][]http.Header
	uploads atomic.Int64 // request bodies read whole
}

func (o *hostileOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.seen[r.URL.Path] = append(o.seen[r.URL.Path], r.Header.Clone())
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "public, max-age=600")
	switch p := r.URL.Path; {
	case p == "/neg":
		// A negotiator that takes the first acceptable type the client lists.
		w.Header().Set("Vary", "Accept")
		for _, t := range strings.Split(r.Header.Get("Accept"), ",") {
			switch t = strings.TrimSpace(t); t {
			case "application/json", "text/html":
				w.Header().Set("Content-Type", t)
				fmt.Fprintf(w, "as %s", t)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "as text/plain")
	case p == "/links" || strings.HasPrefix(p, "/tenant/"):
		host := r.Host
		if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
			host = fh
		}
		fmt.Fprintf(w, "link=http://%s%s tenant=%s", host, p, r.Header.Get("X-Tenant"))
	case p == "/gz":
		// As nginx's gzip module does: any Accept-Encoding naming gzip, no Vary.
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, "plain body")
			zw.Close()
			return
		}
		io.WriteString(w, "plain body")
	case strings.HasPrefix(p, "/auth/"):
		if r.Header.Get("Authorization") != "Bearer good-token" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		w.Header().Set("ETag", `"a1"`)
		io.WriteString(w, "private page")
	case p == "/big":
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(make([]byte, size))
	case p == "/broken":
		// A chunked answer that breaks off.
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(200)
		io.WriteString(w, strings.Repeat("partial ", 512))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	case p == "/upload":
		if n, err := io.Copy(io.Discard, r.Body); err == nil && n == r.ContentLength {
			o.uploads.Add(1)
		}
		io.WriteString(w, "stored")
	default:
		fmt.Fprintf(w, "page %s", p)
	}
}

func (o *hostileOrigin) requests(path string) []http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[path]
}

// from is an HTTP client whose connections leave from local address
// 127.0.0.x, another client address on the loopback network.
func from(x int) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(x))}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// send makes one request; header is name, value pairs.
func send(t *testing.T, c *http.Client, method, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// rawExchange writes req on a new connection and reads until it closes;
// the error is how the read ended (nil: a clean close).
func rawExchange(t *testing.T, addr, req string) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, req)
	b, err := io.ReadAll(c)
	return string(b), err
}

// ownedBy returns a path under prefix whose key (as the default template
// builds it for host) node id owns among ids.
func ownedBy(t *testing.T, host, prefix, id string, ids ...string) string {
	t.Helper()
	var members []ring.Member
	for _, m := range ids {
		members = append(members, ring.Member{ID: m})
	}
	rg, err := ring.New(1, members)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		p := fmt.Sprintf("%s%d", prefix, i)
		if rg.Owner("http"+host+p).ID == id {
			return p
		}
	}
}

// TestHostileClientsChangeNothingForOthers replays, against real
// processes, each request that once let one client change what another
// gets or spend what another needs, and checks it no longer works and that
// nothing was stored or dropped for other clients.
func TestHostileClientsChangeNothingForOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	origin := &hostileOrigin{seen: map[string][]http.Header{}}
	c := startClusterWith(t, ctx, clusterConfig{nodes: 2, origin: origin, nodeArgs: func(int) []string {
		return []string{"--client-send-timeout", "1s", "--client-body-timeout", "1s", "--client-max-conns-per-addr", "4",
			"--access-log", "stdout"}
	}})
	a := c.admin(t, c.token)
	applied, err := a.PutPolicies(ctx, []*pb.CachePolicy{
		{Name: "tenants", PathPrefix: "/tenant/", KeyTemplate: "$scheme$host$request_uri$http_x_tenant"},
		{Name: "authorized", PathPrefix: "/auth/", AuthorizeEveryRequest: true},
		{Name: "hot", PathPrefix: "/hot/", HotThreshold: 1, ReplicationFactor: 1},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		if err := waitReadyz(ctx, nd, fmt.Sprintf("policies=%d ", applied[0].GetRevision())); err != nil {
			t.Fatal(err)
		}
	}
	n1, n2 := "http://"+c.nodes[0].client, "http://"+c.nodes[1].client
	client := from(1)

	t.Run("1 Connection naming a keyed field", func(t *testing.T) {
		for _, h := range [][]string{
			{"Accept", "application/json", "Connection", "Accept"},
			{"X-Tenant", "t2", "Connection", "X-Tenant"},
			{"Connection", "X-Forwarded-For"},
			{"Connection", "keep-alive, Forwarded"},
		} {
			path := "/neg"
			if h[0] == "X-Tenant" {
				path = "/tenant/page"
			}
			before := len(origin.requests(path))
			if resp, body := send(t, client, "GET", n1+path, h...); resp.StatusCode != 400 || !strings.Contains(body, "Connection names") {
				t.Fatalf("%v: %d %q; want 400", h, resp.StatusCode, body)
			}
			if got := len(origin.requests(path)); got != before {
				t.Fatalf("%v: the refused request reached the origin", h)
			}
		}
		// The variants are each client's own.
		if _, body := send(t, client, "GET", n2+"/neg", "Accept", "application/json"); body != "as application/json" {
			t.Fatalf("JSON client got %q", body)
		}
		if _, body := send(t, client, "GET", n1+"/neg", "Accept", "text/plain"); body != "as text/plain" {
			t.Fatalf("text client got %q", body)
		}
		if resp, body := send(t, client, "GET", n1+"/neg", "Accept", "application/json"); body != "as application/json" || resp.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("JSON client again: %s %q; want the stored JSON", resp.Header.Get("X-Cache"), body)
		}
		if _, body := send(t, client, "GET", n1+"/tenant/page", "X-Tenant", "t1"); !strings.Contains(body, "tenant=t1") {
			t.Fatalf("tenant t1 got %q", body)
		}
		// A hop-by-hop field of the client's own goes, and the chain the
		// node adds reaches the origin.
		send(t, client, "GET", n1+"/echo", "Connection", "X-Private", "X-Private", "1")
		seen := origin.requests("/echo")
		if len(seen) != 1 || seen[0].Get("X-Private") != "" || !strings.Contains(seen[0].Get("X-Forwarded-For"), "127.0.0.1") {
			t.Fatalf("the origin saw %v", seen)
		}
	})

	t.Run("3 a Host port that is no number", func(t *testing.T) {
		if resp, _ := send(t, client, "GET", n1+"/links", "Host", "www.example.com:evil.example"); resp.StatusCode != 400 {
			t.Fatalf("Host with a port that is no number: %d, want 400", resp.StatusCode)
		}
		// The key leaves the port out, so the origin is sent the port the
		// client reached the node on, never one a client chose: links
		// built from that would be served, from the cache, to every client
		// of the host.
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(n1, "http://"))
		host := "www.example.com:" + port
		_, body := send(t, client, "GET", n1+"/links", "Host", "WWW.Example.com.:8080")
		if body != "link=http://"+host+"/links tenant=" {
			t.Fatalf("the origin built %q; want links to the host as keyed, with the node's port", body)
		}
		if resp, body := send(t, client, "GET", n2+"/links", "Host", "www.example.com"); resp.Header.Get("X-Cache") != "HIT" || strings.Contains(body, "evil") || strings.Contains(body, ":8080") {
			t.Fatalf("plain Host: %s %q", resp.Header.Get("X-Cache"), body)
		}
		for _, h := range origin.requests("/links") {
			if fwd := h.Get("Forwarded"); !strings.Contains(fwd, `host="`+host+`";`) || h.Get("X-Forwarded-Host") != host {
				t.Fatalf("forwarded host %q, %q; want the host as keyed, with the node's port", fwd, h.Get("X-Forwarded-Host"))
			}
		}
	})

	t.Run("4 a header too large for the hop", func(t *testing.T) {
		path := ownedBy(t, "127.0.0.1", "/big-header/", "node-2", "node-1", "node-2")
		var big []string
		for i := range 2500 {
			big = append(big, "X-H"+strconv.Itoa(i), "v")
		}
		for range 4 {
			if resp, _ := send(t, client, "GET", n1+path, big...); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge && resp.StatusCode != 200 {
				t.Fatalf("a request with 2,500 fields: %d", resp.StatusCode)
			}
		}
		if v := metric(t, c.nodes[0], "shardcache_peer_requests_total", `result="skipped"`); v != 0 {
			t.Fatalf("the owner was skipped %v times: its breaker opened", v)
		}
		if resp, _ := send(t, client, "GET", n1+ownedBy(t, "127.0.0.1", "/after/", "node-2", "node-1", "node-2")); resp.Header.Get("X-Cache-Node") != "node-2" {
			t.Fatalf("after the large requests a key of node-2 was served by %s", resp.Header.Get("X-Cache-Node"))
		}
	})

	t.Run("5 x-gzip", func(t *testing.T) {
		resp, body := send(t, client, "GET", n1+"/gz", "Accept-Encoding", "x-gzip")
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("x-gzip: %q", resp.Header.Get("Content-Encoding"))
		}
		resp, body = send(t, client, "GET", n2+"/gz")
		if resp.Header.Get("Content-Encoding") != "" || body != "plain body" {
			t.Fatalf("a client accepting no coding got Content-Encoding %q, %q", resp.Header.Get("Content-Encoding"), body)
		}
		resp, _ = send(t, client, "GET", n1+"/gz", "Accept-Encoding", "gzip")
		if resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("gzip after x-gzip: %q %s; want the stored gzip variant", resp.Header.Get("Content-Encoding"), resp.Header.Get("X-Cache"))
		}
	})

	t.Run("6 clients that stall", func(t *testing.T) {
		// Clients that never read a 64 MiB answer are cut after the send timeout.
		var stalled []net.Conn
		for range 3 {
			conn, err := net.Dial("tcp", c.nodes[1].client)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, "GET /big?size=67108864 HTTP/1.1\r\nHost: x\r\n\r\n")
			stalled = append(stalled, conn)
		}
		if err := eventually(ctx, func() error {
			if v := metric(t, c.nodes[1], "shardcache_client_stalled_total"); v < 3 {
				return fmt.Errorf("%v stalled connections cut", v)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, conn := range stalled {
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			n, _ := io.Copy(io.Discard, conn)
			if n >= 64<<20 {
				t.Fatalf("a stalled client got the whole body (%d bytes)", n)
			}
		}
		// A body that stops coming is cut, not waited on forever.
		conn, err := net.Dial("tcp", c.nodes[1].client)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
		conn.SetDeadline(time.Now().Add(15 * time.Second))
		b, err := io.ReadAll(conn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("a stalled upload held its connection for 15 s")
		}
		if !bytes.HasPrefix(b, []byte("HTTP/1.1 408")) || origin.uploads.Load() != 0 {
			t.Fatalf("a stalled upload was answered %q (%d uploads whole)", b, origin.uploads.Load())
		}
		// One address holds at most 4 connections; another is not refused.
		var held []net.Conn
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9)}}
		for range 4 {
			hc, err := d.Dial("tcp", c.nodes[1].client)
			if err != nil {
				t.Fatal(err)
			}
			defer hc.Close()
			held = append(held, hc)
		}
		extra, err := d.Dial("tcp", c.nodes[1].client)
		if err != nil {
			t.Fatal(err)
		}
		extra.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ = io.ReadAll(extra)
		if !strings.HasPrefix(string(b), "HTTP/1.1 503") {
			t.Fatalf("a 5th connection from one address got %q, want 503", b)
		}
		if resp, _ := send(t, from(10), "GET", n2+"/other-client"); resp.StatusCode != 200 {
			t.Fatalf("another address was refused: %d", resp.StatusCode)
		}
	})

	t.Run("7 loops", func(t *testing.T) {
		_, err := a.PutPolicy(ctx, &pb.CachePolicy{Name: "loop", PathPrefix: "/loop/", OriginUrls: []string{n2}}, false)
		if err == nil || !strings.Contains(err.Error(), "fetch from itself") {
			t.Fatalf("a policy whose origin is node-2: %v; want it refused", err)
		}
		via := "1.1 " + viaOf(t, c, origin, "node-2")
		if resp, _ := send(t, client, "GET", n1+"/looped", "Via", via); resp.StatusCode != http.StatusLoopDetected {
			t.Fatalf("Via naming node-2: %d, want 508", resp.StatusCode)
		}
		if resp, _ := send(t, client, "GET", n1+"/looped", "Via", strings.Repeat("1.1 p, ", 20)+"1.1 p"); resp.StatusCode != http.StatusLoopDetected {
			t.Fatalf("Via of 21 proxies: %d, want 508", resp.StatusCode)
		}
		if len(origin.requests("/looped")) != 0 {
			t.Fatal("a looped request reached the origin")
		}
	})

	t.Run("9 rewrite fields from a client", func(t *testing.T) {
		fields := []string{"X-Forwarded-Ssl", "Front-End-Https", "X-Url-Scheme", "X-Scheme", "X-Forwarded-Uri", "X-Original-Uri",
			"X-Http-Host-Override", "X-Forwarded-Method", "True-Client-Ip", "Cf-Connecting-Ip", "X_forwarded_host", "X-Forwarded-Host"}
		var h []string
		for _, f := range fields {
			h = append(h, f, "evil.example")
		}
		send(t, client, "GET", n1+"/rewrite", h...)
		seen := origin.requests("/rewrite")
		if len(seen) != 1 {
			t.Fatalf("%d origin requests", len(seen))
		}
		for _, f := range fields {
			for k, v := range seen[0] {
				if strings.EqualFold(k, f) && strings.Contains(strings.Join(v, ","), "evil") {
					t.Errorf("the origin got %s: %v", k, v)
				}
			}
		}
	})

	t.Run("10 authorize_every_request says nothing of what is stored", func(t *testing.T) {
		if resp, _ := send(t, client, "GET", n1+"/auth/stored", "Authorization", "Bearer good-token"); resp.StatusCode != 200 {
			t.Fatalf("the authorised client: %d", resp.StatusCode)
		}
		stored, _ := send(t, client, "GET", n1+"/auth/stored", "Authorization", "Bearer bad-token")
		unstored, _ := send(t, client, "GET", n1+"/auth/unstored", "Authorization", "Bearer bad-token")
		if stored.StatusCode != 401 || unstored.StatusCode != 401 {
			t.Fatalf("unauthorised: %d and %d, want 401", stored.StatusCode, unstored.StatusCode)
		}
		for _, f := range []string{"X-Cache", "Age"} {
			if stored.Header.Get(f) != unstored.Header.Get(f) {
				t.Fatalf("%s of a refusal: %q for a stored object, %q for none", f, stored.Header.Get(f), unstored.Header.Get(f))
			}
		}
		if cs := stored.Header.Get("Cache-Status"); strings.Contains(cs, "stale") || strings.Contains(cs, "EXPIRED") {
			t.Fatalf("the refusal's Cache-Status %q tells the object is stored", cs)
		}
	})

	t.Run("11 Accept order", func(t *testing.T) {
		send(t, client, "GET", n1+"/neg", "Accept", "text/html, application/json")
		if _, body := send(t, client, "GET", n1+"/neg", "Accept", "application/json, text/html"); body != "as application/json" {
			t.Fatalf("application/json first got %q", body)
		}
		if _, body := send(t, client, "GET", n2+"/neg", "Accept", "text/html, application/json"); body != "as text/html" {
			t.Fatalf("text/html first got %q", body)
		}
	})

	t.Run("12 hot copies obey the request", func(t *testing.T) {
		path := ownedBy(t, "127.0.0.1", "/hot/", "node-2", "node-1", "node-2")
		var copied bool
		for range 20 {
			resp, _ := send(t, client, "GET", n1+path)
			if strings.HasPrefix(resp.Header.Get("Cache-Status"), "node-1; hit") {
				copied = true
				break
			}
		}
		if !copied {
			t.Fatal("no hot copy at node-1")
		}
		for _, cc := range []string{"no-cache", "max-age=0", "min-fresh=100000"} {
			resp, _ := send(t, client, "GET", n1+path, "Cache-Control", cc)
			if strings.HasPrefix(resp.Header.Get("Cache-Status"), "node-1; hit") {
				t.Fatalf("Cache-Control: %s was answered from the hot copy (%s)", cc, resp.Header.Get("Cache-Status"))
			}
		}
	})

	t.Run("14 HTTP/1.0 and a body that breaks off", func(t *testing.T) {
		got, err := rawExchange(t, c.nodes[0].client, "GET /broken HTTP/1.0\r\nHost: x\r\n\r\n")
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the broken answer (%d bytes) ended with %v; want a reset, never a clean close", len(got), err)
		}
	})

	t.Run("15 HTTP/1.0 with Transfer-Encoding", func(t *testing.T) {
		got, _ := rawExchange(t, c.nodes[0].client, "POST /upload HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n"+
			"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc"+"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
		if n := len(regexp.MustCompile(`(?m)^HTTP/1\.[01] \d{3} `).FindAllString(got, -1)); n != 1 || !strings.Contains(got, "Connection: close") {
			t.Fatalf("answers %q; want one, then the connection closed", got)
		}
		if len(origin.requests("/smuggled")) != 0 {
			t.Fatal("the body was read as a request")
		}
	})

	t.Run("16 a PURGE of 1,000 tags", func(t *testing.T) {
		before := controlMetric(t, c, "shardcache_control_purges_total")
		tags := make([]string, 1000)
		for i := range tags {
			tags[i] = "t" + strconv.Itoa(i)
		}
		resp, body := send(t, client, "PURGE", n1+"/", "Authorization", "Bearer "+c.token, "Surrogate-Key", strings.Join(tags, " "))
		if resp.StatusCode != 400 || !strings.Contains(body, "32") {
			t.Fatalf("PURGE of 1,000 tags: %d %q; want 400 naming the bound", resp.StatusCode, body)
		}
		if after := controlMetric(t, c, "shardcache_control_purges_total"); after != before {
			t.Fatalf("%v purges recorded for a refused PURGE", after-before)
		}
	})

	t.Run("17 secrets in logs", func(t *testing.T) {
		send(t, client, "GET", n1+"/signed?token=s3cret-value&X-Amz-Signature=s1gnature&page=2")
		if err := eventually(ctx, func() error {
			if !strings.Contains(c.nodes[0].proc.Output(), "/signed?token=REDACTED") {
				return errors.New("no access-log line yet")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if out := c.nodes[0].proc.Output(); strings.Contains(out, "s3cret-value") || strings.Contains(out, "s1gnature") {
			t.Fatal("a query-string secret reached the log")
		}
		// An origin URL's password shows in neither the log nor pprof's
		// command line (a node that never joins: its join token is wrong).
		withPassword := strings.Replace(c.originURL, "http://", "http://user:hunter2@", 1)
		nd := &node{id: "node-9", client: freeAddr(t), peer: freeAddr(t), ops: freeAddr(t)}
		nd.proc = startProcess(t, nd.id, filepath.Join(binDir, "shardcache"), "node", "--id", nd.id, "--client", nd.client,
			"--peer", nd.peer, "--ops", nd.ops, "--control-plane", c.control, "--origin", withPassword, "--join-token", "not-it",
			"--admin-token", c.token, "--access-log", "off")
		defer nd.proc.Kill()
		if err := nd.proc.WaitLine(ctx, "node serving"); err != nil {
			t.Fatal(err)
		}
		_, cmdline := send(t, client, "GET", "http://"+nd.ops+"/debug/pprof/cmdline", "Authorization", "Bearer "+c.token)
		if strings.Contains(nd.proc.Output(), "hunter2") || strings.Contains(cmdline, "hunter2") || !strings.Contains(cmdline, "user:xxxxx@") {
			t.Fatalf("the origin's password shows: log %q, cmdline %q", nd.proc.Output(), cmdline)
		}
	})

	t.Run("18 the ops listener from loopback", func(t *testing.T) {
		ops := "http://" + c.nodes[1].ops
		for _, mp := range []string{"GET /stats", "GET /debug/pprof/cmdline", "POST /drain"} {
			method, path, _ := strings.Cut(mp, " ")
			if resp, _ := send(t, client, method, ops+path); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s from loopback without a token: %d, want 401", mp, resp.StatusCode)
			}
		}
		if resp, _ := send(t, client, "GET", ops+"/drain", "Authorization", "Bearer "+c.token); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET /drain: %d, want 405", resp.StatusCode)
		}
		if resp, _ := send(t, client, "GET", ops+"/stats", "Authorization", "Bearer "+c.token); resp.StatusCode != 200 {
			t.Fatalf("/stats with the token: %d", resp.StatusCode)
		}
		if resp, _ := send(t, client, "GET", ops+"/readyz"); resp.StatusCode != 200 {
			t.Fatalf("/readyz: %d", resp.StatusCode)
		}
		// The control plane's reflection lists its services to the admin
		// token only.
		conn, err := grpc.NewClient(c.control, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		list := func(ctx context.Context) error {
			st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			// A refused stream may end before the request is sent: its
			// status comes with Recv.
			st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			_, err = st.Recv()
			return err
		}
		if err := list(ctx); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("reflection without the token: %v, want Unauthenticated", err)
		}
		if err := list(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)); err != nil {
			t.Fatalf("reflection with the admin token: %v", err)
		}
	})

	// Last: it restarts node-1.
	t.Run("2 wrong-token PURGEs from many addresses", func(t *testing.T) {
		for x := 20; x < 32; x++ {
			cl := from(x)
			for range 5 {
				if resp, _ := send(t, cl, "PURGE", n1+"/obj/1", "Authorization", "Bearer wrong-token-guess"); resp.StatusCode != 401 {
					t.Fatalf("a wrong token from 127.0.0.%d: %d, want 401", x, resp.StatusCode)
				}
			}
		}
		start := time.Now()
		resp, body := send(t, client, "PURGE", n1+"/obj/1", "Authorization", "Bearer "+c.token)
		if resp.StatusCode != 200 && resp.StatusCode != 202 {
			t.Fatalf("the valid PURGE through the node: %d %q", resp.StatusCode, body)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the valid PURGE waited %s", d)
		}
		var nodes struct {
			Nodes []any `json:"nodes"`
		}
		if err := c.cachectl(ctx, &nodes, "nodes"); err != nil || len(nodes.Nodes) != 2 {
			t.Fatalf("cachectl from the node's host: %v (%d nodes)", err, len(nodes.Nodes))
		}
		nd := c.nodes[0]
		nd.proc.Kill()
		nd.proc = startProcess(t, nd.id, filepath.Join(binDir, "shardcache"), nd.args...)
		c.waitMembers(ctx, nd, 2)
	})
}

// viaOf is the Via name a node gives itself, read from a request it sent
// to a recording origin.
func viaOf(t *testing.T, c *cluster, o *hostileOrigin, id string) string {
	t.Helper()
	for _, nd := range c.nodes {
		if nd.id != id {
			continue
		}
		resp, _ := send(t, from(1), "GET", "http://"+nd.client+"/via-probe?"+id, "Cache-Control", "no-store")
		if resp.StatusCode != 200 {
			t.Fatalf("via probe: %d", resp.StatusCode)
		}
	}
	for _, h := range o.requests("/via-probe") {
		if v := h.Get("Via"); strings.Contains(v, id+".") {
			_, name, _ := strings.Cut(v[strings.LastIndex(v, "1.1 "):], " ")
			return name
		}
	}
	t.Fatalf("no Via of %s", id)
	return ""
}

// controlMetric reads a counter of the control plane's /metrics, summed.
func controlMetric(t *testing.T, c *cluster, name string) float64 {
	t.Helper()
	return metric(t, &node{id: "control", ops: c.controlOps}, name)
}

// TestControlPlaneTLSEverywhere: a control plane refuses to listen off
// loopback in plaintext; served over TLS from `shardcache tls-files` and
// reaching a TLS etcd (Debian's etcd-server, client certificates
// required) with --etcd-ca/--etcd-cert/--etcd-key, it admits a node that
// verifies it with --control-plane-ca and answers cachectl --ca.
func TestControlPlaneTLSEverywhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(binDir, "shardcache")
	off := startProcess(t, "control-off-loopback", bin, "control", "--listen", "0.0.0.0:"+strings.Split(freeAddr(t), ":")[1],
		"--admin-token", "t0ken-t0ken", "--join-token", "j", "--etcd-dir", t.TempDir())
	<-off.done
	if out := off.Output(); off.err == nil || !strings.Contains(out, "--insecure-plaintext") {
		t.Fatalf("a plaintext control plane off loopback: %v %q; want a refusal naming --insecure-plaintext", off.err, out)
	}

	// etcd over mutual TLS.
	ca := newTestCA(t, "etcd CA")
	etcdCert, etcdKey := ca.issueFor(t, "etcd", "127.0.0.1")
	clientCert, clientKey := ca.issue(t, "shardcache-control")
	etcdURL := "https://" + freeAddr(t)
	peerURL := "http://" + freeAddr(t)
	etcdBin := lookEtcd(t)
	etcd := startProcess(t, "etcd-tls", etcdBin, "--name", "tls", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL, "--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL, "--initial-cluster", "tls="+peerURL,
		"--cert-file", etcdCert, "--key-file", etcdKey, "--trusted-ca-file", ca.file, "--client-cert-auth")
	if err := etcd.WaitLine(ctx, "ready to serve client requests"); err != nil {
		t.Fatal(err)
	}

	tlsDir := filepath.Join(t.TempDir(), "tls")
	gen := startProcess(t, "tls-files", bin, "tls-files", "--names", "127.0.0.1,localhost", "--out", tlsDir)
	<-gen.done
	if gen.err != nil {
		t.Fatalf("tls-files: %v %s", gen.err, gen.Output())
	}
	control, controlOps := freeAddr(t), freeAddr(t)
	cp := startProcess(t, "control", bin, "control", "--listen", control, "--ops", controlOps, "--admin-token", "t0ken-t0ken",
		"--join-token", "e2e-join", "--etcd-endpoints", etcdURL, "--etcd-ca", ca.file, "--etcd-cert", clientCert, "--etcd-key", clientKey,
		"--tls-cert", filepath.Join(tlsDir, "tls.crt"), "--tls-key", filepath.Join(tlsDir, "tls.key"), "--lease-ttl", "2s", "--epoch-batch-window", "200ms")
	if err := cp.WaitLine(ctx, "control plane serving"); err != nil {
		t.Fatal(err)
	}
	osrv := &http.Server{Handler: &countingOrigin{counts: map[string]int{}}}
	ol, _ := net.Listen("tcp", "127.0.0.1:0")
	go osrv.Serve(ol)
	defer osrv.Close()
	nd := &node{id: "node-1", client: freeAddr(t), peer: freeAddr(t), ops: freeAddr(t)}
	nd.proc = startProcess(t, nd.id, bin, "node", "--id", nd.id, "--client", nd.client, "--peer", nd.peer, "--ops", nd.ops,
		"--control-plane", control, "--control-plane-ca", filepath.Join(tlsDir, "ca.crt"), "--origin", "http://"+ol.Addr().String(),
		"--join-token", "e2e-join", "--access-log", "off", "--drain-grace", "-1s")
	c := &cluster{t: t, token: "t0ken-t0ken", control: control}
	c.waitMembers(ctx, nd, 1)
	out, err := runCachectl(ctx, "--control-plane", control, "--ca", filepath.Join(tlsDir, "ca.crt"), "--token", c.token, "-o", "json", "nodes")
	if err != nil || !strings.Contains(out, `"node-1"`) {
		t.Fatalf("cachectl over TLS: %v %s", err, out)
	}
	if out, err := runCachectl(ctx, "--control-plane", control, "--token", c.token, "nodes"); err == nil {
		t.Fatalf("cachectl without TLS was served by a TLS control plane: %s", out)
	}
}

// lookEtcd is Debian's etcd-server binary.
func lookEtcd(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/etcd", "/usr/local/bin/etcd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("etcd is not installed: make test installs Debian's etcd-server (e2e/install-deps.sh)")
	return ""
}

// runCachectl runs the real cachectl and returns its combined output.
func runCachectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), args...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// issueFor writes a server certificate for name and an IP address.
func (ca *testCA) issueFor(t *testing.T, name, ip string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = ca.issue(t, name)
	// Re-issue with the IP address as well: etcd's clients dial it.
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	leaf.IPAddresses = append(leaf.IPAddresses, net.ParseIP(ip))
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, leaf.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEMFile(t, certFile, "CERTIFICATE", der)
	return certFile, keyFile
}

// TestARemovedNodesCertificateIsRefusedAtOnce: once the epoch that leaves
// a node out is applied, its still-valid peer certificate is refused on
// the other nodes' peer ports, not one epoch later.
func TestARemovedNodesCertificateIsRefusedAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := newTestCA(t, "cluster CA")
	certs := map[int][2]string{}
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: &echoOrigin{counts: map[string]int{}}, nodeArgs: func(i int) []string {
		cert, key := ca.issue(t, fmt.Sprintf("node-%d", i))
		certs[i] = [2]string{cert, key}
		return []string{"--peer-cert", cert, "--peer-key", key, "--peer-ca", ca.file}
	}})
	pair, err := tls.LoadX509KeyPair(certs[3][0], certs[3][1])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	peerGet := func() int {
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: "node-1"}}}
		defer cl.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+c.nodes[0].peer+"/obj/x", nil)
		req.Header.Set("X-Shardcache-Hop", "node-3")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := peerGet(); code != 200 {
		t.Fatalf("node-3's certificate while it is a member: %d", code)
	}
	c.nodes[2].proc.Kill()
	c.waitMembers(ctx, c.nodes[0], 2)
	if code := peerGet(); code != http.StatusForbidden {
		t.Fatalf("node-3's certificate once it left the ring: %d, want 403", code)
	}
}
