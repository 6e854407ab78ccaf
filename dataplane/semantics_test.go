package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// scripted is an origin whose answer per path prefix is a function of the
// request and how many requests that path has seen.
type scripted struct {
	mu       sync.Mutex
	counts   map[string]int
	handlers map[string]func(w http.ResponseWriter, r *http.Request, n int)
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts[r.URL.Path]++
	n := s.counts[r.URL.Path]
	s.mu.Unlock()
	best := ""
	for prefix := range s.handlers { // the longest prefix wins
		if strings.HasPrefix(r.URL.Path, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		http.NotFound(w, r)
		return
	}
	s.handlers[best](w, r, n)
}

func (s *scripted) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[path]
}

// TestPolicyDrivenSemantics checks the rules a policy changes, each through
// the key's owner and through a node that relays to it.
func TestPolicyDrivenSemantics(t *testing.T) {
	answer := func(kv ...string) func(http.ResponseWriter, *http.Request, int) {
		return func(w http.ResponseWriter, r *http.Request, n int) {
			for i := 0; i < len(kv); i += 2 {
				w.Header().Add(kv[i], kv[i+1])
			}
			io.WriteString(w, "v"+strconv.Itoa(n))
		}
	}
	o := &scripted{counts: map[string]int{}, handlers: map[string]func(http.ResponseWriter, *http.Request, int){
		"/slow/": func(w http.ResponseWriter, r *http.Request, n int) { <-r.Context().Done() }, // answers never
		"/swr/":  answer("Cache-Control", "max-age=60", "Age", "120"),
		"/sie/": func(w http.ResponseWriter, r *http.Request, n int) {
			if n > 1 {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			answer("Cache-Control", "max-age=60", "Age", "120")(w, r, n)
		},
		"/auth/public/":  answer("Cache-Control", "public, max-age=60"),
		"/auth/plain/":   answer("Cache-Control", "max-age=60"),
		"/targeted/":     answer("Cache-Control", "no-store", "CDN-Cache-Control", "no-store", "Shardcache-Cache-Control", "max-age=60"),
		"/auth-bypass/":  answer("Cache-Control", "public, max-age=60"),
		"/cookie/":       answer("Cache-Control", "max-age=60", "Set-Cookie", "a=1"),
		"/private/":      answer("Cache-Control", "private, max-age=60"),
		"/ttl/explicit/": answer("Cache-Control", "max-age=0"),
		"/ttl/":          func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(404) },
		"/heuristic/": func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Last-Modified", time.Now().Add(-100*24*time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(599)
		},
		"/big/": func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Write(make([]byte, 5000))
		},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, b, e := startPair(t, origin.URL)
	hour := durationpb.New(time.Hour)
	set := &pb.PolicySet{Revision: 3, Policies: []*pb.CachePolicy{
		{Name: "swr", PathPrefix: "/swr/", StaleWhileRevalidate: hour},
		{Name: "sie", PathPrefix: "/sie/", StaleIfError: hour},
		{Name: "auth", PathPrefix: "/auth/"},
		{Name: "targeted", PathPrefix: "/targeted/", TargetedCacheControl: "Shardcache-Cache-Control"},
		{Name: "auth-bypass", PathPrefix: "/auth-bypass/", CacheAuthorized: proto.Bool(false)},
		{Name: "cookie", PathPrefix: "/cookie/", StoreSetCookie: true},
		{Name: "private", PathPrefix: "/private/", StorePrivate: true},
		{Name: "ttl", PathPrefix: "/ttl/", StatusTtls: []*pb.StatusTTL{{StatusFrom: 200, StatusTo: 499, Ttl: hour}}},
		{Name: "big", PathPrefix: "/big/", MaxObjectSize: 4000},
		{Name: "heuristic", PathPrefix: "/heuristic/allowed/", HeuristicStatuses: []uint32{599}},
		{Name: "slow", PathPrefix: "/slow/", OriginTimeout: durationpb.New(200 * time.Millisecond)},
	}}
	for _, n := range []*Node{a, b} {
		if err := n.ApplyPolicies(set); err != nil {
			t.Fatal(err)
		}
	}
	type step struct {
		hdr    []string
		cache  string
		code   int
		origin int
		// absent and present are header fields the answer must not and
		// must carry.
		absent, present string
	}
	cases := []struct {
		name, prefix string
		steps        []step
	}{
		{"policy stale-while-revalidate", "/swr/", []step{{origin: 1}, {cache: "UPDATING"}}},
		{"the policy's targeted field governs this cluster and is not passed on (RFC 9213)", "/targeted/",
			[]step{{absent: "Shardcache-Cache-Control", present: "Cdn-Cache-Control"},
				{cache: "HIT", origin: 1, absent: "Shardcache-Cache-Control", present: "Cache-Control"}}},
		{"policy stale-if-error on a 502", "/sie/", []step{{origin: 1}, {cache: "STALE", origin: 2}}},
		{"authorized request, public response, stored", "/auth/public/", []step{{hdr: []string{"Authorization", "Bearer t"}, cache: "MISS"},
			{hdr: []string{"Authorization", "Bearer t"}, cache: "HIT", origin: 1}}},
		{"authorized request bypassed by the policy", "/auth-bypass/", []step{{hdr: []string{"Authorization", "Bearer t"}, cache: "BYPASS"},
			{hdr: []string{"Authorization", "Bearer t"}, cache: "BYPASS", origin: 2}}},
		{"authorized request, response not public, not stored", "/auth/plain/", []step{{hdr: []string{"Authorization", "Bearer t"}, cache: "MISS"},
			{hdr: []string{"Authorization", "Bearer t"}, cache: "MISS", origin: 2}}},
		{"Set-Cookie stored when the policy says", "/cookie/", []step{{}, {cache: "HIT", origin: 1}}},
		{"private stored when the policy says", "/private/", []step{{}, {cache: "HIT", origin: 1}}},
		{"status TTL for a 404 without freshness", "/ttl/", []step{{code: 404}, {code: 404, cache: "HIT", origin: 1}}},
		{"the response's own freshness beats the status TTL", "/ttl/explicit/", []step{{}, {origin: 2}}},
		{"over the policy's max object size: served, not stored", "/big/", []step{{}, {cache: "MISS", origin: 2}}},
		{"heuristic freshness for a 599 the policy names (RFC 9111 4.2.2)", "/heuristic/allowed/", []step{{code: 599}, {code: 599, cache: "HIT", origin: 1}}},
		{"no heuristic freshness for a 599 otherwise", "/heuristic/other/", []step{{code: 599}, {code: 599, cache: "MISS", origin: 2}}},
		{"the policy's origin timeout", "/slow/", []step{{code: http.StatusBadGateway, origin: 1}}},
	}
	for _, via := range []string{"owner", "relay"} {
		for _, c := range cases {
			t.Run(via+"/"+c.name, func(t *testing.T) {
				path := pathOwnedBy(t, e, c.prefix+via+"/", "b")
				node := b
				if via == "relay" {
					node = a
				}
				for i, s := range c.steps {
					resp, _ := do(t, "GET", "http://"+node.ClientAddr().String()+path, s.hdr...)
					code := s.code
					if code == 0 {
						code = 200
					}
					if resp.StatusCode != code || s.cache != "" && resp.Header.Get("X-Cache") != s.cache {
						t.Fatalf("step %d: %d %q, want %d %q", i+1, resp.StatusCode, resp.Header.Get("X-Cache"), code, s.cache)
					}
					if s.origin > 0 && o.count(path) != s.origin {
						t.Fatalf("step %d: origin saw %d requests, want %d", i+1, o.count(path), s.origin)
					}
					if s.absent != "" && resp.Header.Get(s.absent) != "" || s.present != "" && resp.Header.Get(s.present) == "" {
						t.Fatalf("step %d: answer's header %v; want no %s and a %s", i+1, resp.Header, s.absent, s.present)
					}
				}
			})
		}
	}
}

// TestOriginFailureIsShared: requests collapsed onto a fill whose origin
// request fails all get the failure; the origin is not asked again by each.
func TestOriginFailureIsShared(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	gate := make(chan struct{})
	var hits atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-gate
		panic(http.ErrAbortHandler) // the connection drops before any answer
	}))
	origin.Config.ErrorLog = nil
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL)
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	const clients = 10
	codes := make(chan int, clients)
	for range clients {
		go func() {
			resp, _ := do(t, "GET", "http://"+n.ClientAddr().String()+"/fail")
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for hits.Load() != 1 || n.owner.Waiting() != clients-1 {
		if time.Now().After(deadline) {
			t.Fatalf("origin saw %d requests and %d clients wait; want 1 and %d", hits.Load(), n.owner.Waiting(), clients-1)
		}
		time.Sleep(2 * time.Millisecond) // polling the node's own counters
	}
	close(gate)
	for range clients {
		if c := <-codes; c != http.StatusBadGateway {
			t.Fatalf("a client got %d, want 502", c)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("origin saw %d requests, want 1: the failure is shared", hits.Load())
	}
}

// TestInterimResponsesPassThrough: a 103 Early Hints from the origin
// reaches the client before the final answer, directly and relayed.
func TestInterimResponsesPassThrough(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "final")
	}))
	defer origin.Close()
	a, b, e := startPair(t, origin.URL)
	for _, tc := range []struct{ name, url, method string }{
		{"fill at the owner", "http://" + b.ClientAddr().String() + pathOwnedBy(t, e, "/hints/o/", "b"), "GET"},
		{"fill relayed", "http://" + a.ClientAddr().String() + pathOwnedBy(t, e, "/hints/r/", "b"), "GET"},
		{"bypass", "http://" + a.ClientAddr().String() + "/hints/post", "POST"},
	} {
		var hint string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints {
					hint = h.Get("Link")
				}
				return nil
			}})
		req, _ := http.NewRequestWithContext(ctx, tc.method, tc.url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if hint != "</style.css>; rel=preload" || string(body) != "final" || resp.Header.Get("Link") != "" {
			t.Fatalf("%s: 103 Link %q, body %q, final Link %q; want the hint before the final answer, not in it", tc.name, hint, body, resp.Header.Get("Link"))
		}
	}
}

// TestAccessLogSamplingAndLimits: a sampled-out request is not logged but
// a 5xx always is; an oversized request header is refused with 431.
func TestAccessLogSamplingAndLimits(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/err" {
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	var log syncBuffer
	n := startNode(t, "a", fc.addr, origin.URL, func(c *Config) { c.AccessLog, c.AccessLogSample = &log, 1e-9 })
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	base := "http://" + n.ClientAddr().String()
	do(t, "GET", base+"/ok")
	do(t, "GET", base+"/err")
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d access-log lines, want only the 5xx: %q", len(lines), log.String())
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil || entry["path"] != "/err" || entry["status"] != float64(503) {
		t.Fatalf("access-log line %q (%v), want the 503 for /err", lines[0], err)
	}
	resp, _ := do(t, "GET", base+"/ok", "X-Huge", strings.Repeat("h", 100<<10))
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB header got %d, want 431", resp.StatusCode)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
