package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

// reasonPolicies are the policies TestEveryReasonIsNamedEverywhere needs
// beside the default one.
const reasonPolicies = `- name: bypassed
  path_prefix: /r/bypass-mode/
  mode: bypass
- name: rules
  path_prefix: /r/rule/
  bypass: [{headers: [X-Skip]}]
- name: small
  path_prefix: /r/small/
  max_object_size: 100
- name: variants
  path_prefix: /r/vary/
  max_variants: 1
- name: excluded
  path_prefix: /r/excluded/
  excluded_statuses: ["404"]
- name: authorized
  path_prefix: /r/authz/
  authorize_every_request: true
- name: down
  path_prefix: /r/down/
  origin_urls: [http://127.0.0.1:1]
`

// reasonOrigin answers each /r/ path as its reason asks.
func reasonOrigin(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/r/no-store"):
		h.Set("Cache-Control", "no-store")
	case strings.HasPrefix(p, "/r/private"):
		h.Set("Cache-Control", "private, max-age=60")
	case strings.HasPrefix(p, "/r/cookie"):
		h.Set("Cache-Control", "max-age=60")
		h.Set("Set-Cookie", "session=abc")
	case strings.HasPrefix(p, "/r/small/"):
		h.Set("Cache-Control", "max-age=60")
		io.WriteString(w, strings.Repeat("x", 1000))
		return
	case strings.HasPrefix(p, "/r/vary/"):
		h.Set("Cache-Control", "max-age=60")
		h.Set("Vary", "X-V")
	case strings.HasPrefix(p, "/r/expired"):
		h.Set("Cache-Control", "max-age=0")
		h.Set("Etag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	case strings.HasPrefix(p, "/r/excluded/"):
		h.Set("Cache-Control", "max-age=60")
		w.WriteHeader(http.StatusNotFound)
	case strings.HasPrefix(p, "/r/status"):
		w.WriteHeader(http.StatusInternalServerError) // no freshness of its own
	case strings.HasPrefix(p, "/r/no-lifetime"):
		// neither freshness nor a validator
	case strings.HasPrefix(p, "/r/must-understand"):
		h.Set("Cache-Control", "max-age=60, must-understand")
		w.WriteHeader(599) // a status whose caching rules no cache knows
	case strings.HasPrefix(p, "/r/disconnect"):
		// Stored stale; its revalidation finds the connection closed.
		if r.Header.Get("If-None-Match") != "" {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		h.Set("Cache-Control", "max-age=60")
		h.Set("Age", "120")
		h.Set("Etag", `"d1"`)
	case strings.HasPrefix(p, "/r/varies"):
		h.Set("Cache-Control", "max-age=60")
		h.Set("Vary", "X-V")
	case strings.HasPrefix(p, "/r/vary-star"):
		h.Set("Cache-Control", "max-age=60")
		h.Set("Vary", "*")
	case strings.HasPrefix(p, "/r/young"):
		h.Set("Cache-Control", "max-age=600")
		h.Set("Age", "100")
	case strings.HasPrefix(p, "/r/gz"):
		h.Set("Cache-Control", "max-age=60")
		h.Set("Content-Encoding", "gzip")
		w.Write(gzipped("body of " + p))
		return
	case staleOrigin(w, r):
		return
	case strings.HasPrefix(p, "/r/coded"):
		rawAnswer([]string{"Cache-Control: max-age=60", "Transfer-Encoding: compress, chunked"}, chunked([]byte("coded")))(w, r, 1)
		return
	default:
		h.Set("Cache-Control", "max-age=60")
	}
	io.WriteString(w, "body of "+p)
}

// staleOrigin answers the paths whose response is stored stale at once
// (Age beyond max-age), with a validator: each revalidation is answered
// 304, but /r/sie's with a 500. It reports whether it answered.
func staleOrigin(w http.ResponseWriter, r *http.Request) bool {
	cc, ok := map[string]string{"/r/nocache": "no-cache", "/r/must-reval": "max-age=60, must-revalidate", "/r/aged": "max-age=60",
		"/r/swr": "max-age=60, stale-while-revalidate=600", "/r/sie": "max-age=60, stale-if-error=600"}[r.URL.Path]
	if !ok {
		return false
	}
	h := w.Header()
	h.Set("Cache-Control", cc)
	h.Set("Age", "120")
	h.Set("Etag", `"e1"`)
	switch {
	case r.Header.Get("If-None-Match") == "":
		io.WriteString(w, "body of "+r.URL.Path)
	case r.URL.Path == "/r/sie":
		w.WriteHeader(http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusNotModified)
	}
	return true
}

// TestEveryReasonIsNamedEverywhere makes one request for each reason an
// answer is not a plain hit, through one node of two (so that some are
// relayed to their owner), and finds that reason in the answer's
// Cache-Status (detail), in the node's access log and in `cachectl log`,
// each found by the request's id; the reason counter counts them, and
// `cachectl inspect` shows a purged URL's owner saying so. The reasons
// that need nodes of their own (slices, the disk tier, restarts, the
// control plane stopped) are TestReasonsOfSlicesTheStoreAndTheControlPlane's.
func TestEveryReasonIsNamedEverywhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	access := filepath.Join(dir, "access.log")
	c := startClusterWith(t, ctx, clusterConfig{nodes: 2, origin: http.HandlerFunc(reasonOrigin), nodeArgs: func(i int) []string {
		args := []string{"--hot-threshold", "-1"}
		if i == 1 {
			args = append(args, "--access-log", access)
		}
		return args
	}})
	front := c.nodes[0]
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(reasonPolicies), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.cachectlText(ctx, "policy", "apply", "-f", policies); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(nd *node, method, path string, hdr ...string) *http.Response {
		t.Helper()
		return request(ctx, t, client, nd, method, path, hdr...)
	}
	// Every node has the policies once each bypasses by the new one.
	for _, nd := range c.nodes {
		err := eventually(ctx, func() error {
			if cs := send(nd, "GET", "/r/bypass-mode/probe").Header.Get("Cache-Status"); !strings.Contains(cs, "detail=policy-bypass") {
				return fmt.Errorf("%s: Cache-Status %q before the policies arrived", nd.id, cs)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// A stream of node-1's records, open once a probe comes through it.
	lines := &lineBuffer{}
	stream := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), append(c.controlArgs(), "log", "--node", front.id)...)
	stream.Stdout = lines
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Process.Kill(); stream.Wait() })
	err := eventually(ctx, func() error {
		id := send(front, "GET", "/r/probe").Header.Get("X-Request-Id")
		if !strings.Contains(lines.String(), `"request_id":"`+id+`"`) {
			return fmt.Errorf("the log stream has not shown probe %s yet", id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Requests that set the stage for a reason, then the one that has it.
	send(front, "GET", "/r/expired")
	send(front, "GET", "/r/fresh", "X-V", "a")
	send(front, "GET", "/r/vary/x", "X-V", "a")
	send(front, "GET", "/r/purge/x")
	var purged purgeJSON
	for _, p := range []string{"/r/disconnect", "/r/nocache", "/r/must-reval", "/r/aged", "/r/swr", "/r/sie", "/r/young", "/r/gz",
		"/r/authz/a", "/r/soft/x", "/r/inv/x"} {
		send(front, "GET", p)
	}
	send(front, "GET", "/r/varies", "X-V", "a")
	if err := c.cachectl(ctx, &purged, "purge", "--soft", "http://127.0.0.1/r/soft/x"); err != nil {
		t.Fatal(err)
	}
	send(front, "POST", "/r/inv/x") // its success invalidates what is stored (RFC 9111 4.4)
	if err := c.cachectl(ctx, &purged, "purge", "http://127.0.0.1/r/purge/x"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		reason, method, path string
		hdr                  []string
		cache                string // X-Cache
	}{
		{"method", "POST", "/r/post", nil, "BYPASS"},
		// The default policy caches authorised requests: what answers one
		// is stored only when it says it may be shared (RFC 9111 3.5).
		{"authorization", "GET", "/r/auth", []string{"Authorization", "Bearer x"}, "MISS"},
		{"request-no-store", "GET", "/r/nostore-req", []string{"Cache-Control", "no-store"}, "BYPASS"},
		{"policy-bypass", "GET", "/r/bypass-mode/a", nil, "BYPASS"},
		{"bypass-rule", "GET", "/r/rule/a", []string{"X-Skip", "1"}, "BYPASS"},
		{"uri-miss", "GET", "/r/plain", nil, "MISS"},
		{"no-store", "GET", "/r/no-store", nil, "MISS"},
		{"private", "GET", "/r/private", nil, "MISS"},
		{"set-cookie", "GET", "/r/cookie", nil, "MISS"},
		{"too-large", "GET", "/r/small/a", nil, "MISS"},
		{"vary-limit", "GET", "/r/vary/x", []string{"X-V", "b"}, "MISS"},
		{"excluded", "GET", "/r/excluded/a", nil, "MISS"},
		{"status", "GET", "/r/status", nil, "MISS"},
		{"no-lifetime", "GET", "/r/no-lifetime", nil, "MISS"},
		{"expired", "GET", "/r/expired", nil, "REVALIDATED"},
		{"request-no-cache", "GET", "/r/fresh", []string{"Cache-Control", "no-cache"}, "EXPIRED"},
		{"only-if-cached", "GET", "/r/never", []string{"Cache-Control", "only-if-cached"}, "MISS"},
		{"purged", "GET", "/r/purge/x", nil, "MISS"},
		{"origin-error", "GET", "/r/down/a", nil, "MISS"},
		{"must-understand", "GET", "/r/must-understand", nil, "MISS"},
		{"stale-if-disconnected", "GET", "/r/disconnect", nil, "STALE"},
		{"transfer-coding", "GET", "/r/coded", nil, "MISS"},
		{"upgrade", "GET", "/r/upgrade", []string{"Upgrade", "websocket"}, "BYPASS"},
		{"vary-miss", "GET", "/r/varies", []string{"X-V", "b"}, "MISS"},
		{"vary-star", "GET", "/r/vary-star", nil, "MISS"},
		{"no-cache", "GET", "/r/nocache", nil, "REVALIDATED"},
		{"must-revalidate", "GET", "/r/must-reval", []string{"Cache-Control", "max-stale"}, "REVALIDATED"},
		{"max-stale", "GET", "/r/aged", []string{"Cache-Control", "max-stale"}, "STALE"},
		{"stale-while-revalidate", "GET", "/r/swr", nil, "UPDATING"},
		{"stale-if-error", "GET", "/r/sie", nil, "STALE"},
		{"request-max-age", "GET", "/r/young", []string{"Cache-Control", "max-age=10"}, "EXPIRED"},
		{"request-min-fresh", "GET", "/r/young", []string{"Cache-Control", "min-fresh=1000"}, "EXPIRED"},
		// A coded response varies on Accept-Encoding as it is stored.
		{"vary-miss", "GET", "/r/gz", []string{"Accept-Encoding", "identity"}, "MISS"},
		// The origin coded that variant all the same: what is stored for
		// it is in a coding its requests do not accept.
		{"encoding", "GET", "/r/gz", []string{"Accept-Encoding", "identity"}, "MISS"},
		{"authorize-each", "GET", "/r/authz/a", nil, "EXPIRED"},
		{"soft-purged", "GET", "/r/soft/x", nil, "EXPIRED"},
		{"invalidated", "GET", "/r/inv/x", nil, "MISS"},
	}
	ids := map[string]string{} // request id -> reason
	for _, tt := range cases {
		resp := send(front, tt.method, tt.path, tt.hdr...)
		id := resp.Header.Get("X-Request-Id")
		cs := strings.Join(resp.Header.Values("Cache-Status"), ", ")
		// The first member is the node that decided: the owner, for a
		// relayed request.
		first, _, _ := strings.Cut(cs, ",")
		if !strings.Contains(first+";", "; detail="+tt.reason+";") || tt.reason == "vary-miss" && !strings.Contains(first, "; fwd=vary-miss;") || resp.Header.Get("X-Cache") != tt.cache || id == "" {
			t.Errorf("%s %s (%s): X-Cache %q, Cache-Status %q, X-Request-Id %q; want %s and detail=%s", tt.method, tt.path, tt.reason,
				resp.Header.Get("X-Cache"), cs, id, tt.cache, tt.reason)
		}
		ids[id] = tt.reason
	}

	// The access log and the stream have each request, with its reason.
	err = waitLogged(ctx, t, ids, map[string]func() (string, error){
		"the access log": func() (string, error) { b, err := os.ReadFile(access); return string(b), err },
		"cachectl log":   func() (string, error) { return lines.String(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := metric(t, front, "shardcache_request_reasons_total", `reason="set-cookie"`); n < 1 {
		t.Errorf("shardcache_request_reasons_total{reason=\"set-cookie\"} = %v; want the request counted", n)
	}

	// inspect: the purged URL's owner says what its last answer was.
	rg, err := ring.New(1, []ring.Member{{ID: "node-1"}, {ID: "node-2"}})
	if err != nil {
		t.Fatal(err)
	}
	owner := rg.AppendOwners(nil, "http127.0.0.1/r/purge/x", 1)[0].ID
	var in struct {
		Nodes []struct {
			Node string `json:"node"`
			Last *struct {
				Cache, Reason string
			} `json:"last"`
		} `json:"nodes"`
	}
	if err := c.cachectl(ctx, &in, "inspect", "http://127.0.0.1/r/purge/x"); err != nil {
		t.Fatal(err)
	}
	for _, n := range in.Nodes {
		if n.Node == owner && (n.Last == nil || n.Last.Reason != "purged" || n.Last.Cache != "MISS") {
			t.Errorf("inspect: %s, the owner, shows last answer %+v; want a MISS, purged", owner, n.Last)
		}
	}
}

// request sends method path to nd's client listener with the header
// fields hdr (name, value, ...), and reads the answer's body away.
func request(ctx context.Context, t *testing.T, client *http.Client, nd *node, method, path string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+nd.client+path, nil)
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// waitLogged waits until each source (an access log, a cachectl log
// stream: JSON records a line) has every request of ids (request id ->
// reason) with its reason; each of those records must carry the fields
// every record has.
func waitLogged(ctx context.Context, t *testing.T, ids map[string]string, sources map[string]func() (string, error)) error {
	t.Helper()
	return eventually(ctx, func() error {
		for what, read := range sources {
			text, err := read()
			if err != nil {
				return err
			}
			got := loggedReasons(t, text, ids)
			for id, reason := range ids {
				if got[id] != reason {
					return fmt.Errorf("%s has request %s (%s) with reason %q", what, id, reason, got[id])
				}
			}
		}
		return nil
	})
}

// loggedReasons is the reason of each record in text whose request is
// one of ids.
func loggedReasons(t *testing.T, text string, ids map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var raw map[string]any
		if json.Unmarshal(sc.Bytes(), &raw) != nil {
			continue
		}
		id, _ := raw["request_id"].(string)
		if _, ok := ids[id]; !ok {
			continue
		}
		got[id], _ = raw["reason"].(string)
		for _, field := range []string{"user_agent", "proto", "key", "referer"} {
			if _, ok := raw[field]; !ok {
				t.Errorf("a record without %s: %s", field, sc.Text())
			}
		}
	}
	return got
}

// ownedPaths returns n paths under prefix whose owner, in a ring of
// members, is owner.
func ownedPaths(t *testing.T, members []string, owner, prefix string, n int) []string {
	t.Helper()
	var ms []ring.Member
	for _, m := range members {
		ms = append(ms, ring.Member{ID: m})
	}
	rg, err := ring.New(1, ms)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		p := fmt.Sprintf("%s%d", prefix, i)
		if rg.AppendOwners(nil, "http127.0.0.1"+p, 1)[0].ID == owner {
			out = append(out, p)
		}
	}
	return out
}

// TestCachectlLogFullShowsSubRequests: `cachectl log --full` with a
// filter shows only the requests that match it, each with its request's
// fields and the requests made for it: the relay to the owner, and the
// owner's origin request inside it; as JSON and as text.
func TestCachectlLogFullShowsSubRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 2, origin: &countingOrigin{counts: map[string]int{}},
		nodeArgs: func(int) []string { return []string{"--hot-threshold", "-1"} }})
	front, members := c.nodes[0], []string{"node-1", "node-2"}
	filter := `route == relayed and status == 200 and path ~ "^/f/"`
	stream := func(args ...string) *lineBuffer {
		lines := &lineBuffer{}
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), append(append(c.controlArgs(), "log", "--node", front.id,
			"--full", "--filter", filter), args...)...)
		cmd.Stdout = lines
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return lines
	}
	jsonLines, text := stream("--format", "json"), stream()
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) string {
		resp, err := client.Get("http://" + front.client + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-Request-Id")
	}
	probes := ownedPaths(t, members, "node-2", "/f/probe-", 100)
	i := 0
	err := eventually(ctx, func() error {
		// Each probe a miss of its own, however many it takes: the
		// records checked below are all relayed misses.
		id := get(probes[i%len(probes)] + "?size=10&try=" + strconv.Itoa(i))
		i++
		if !strings.Contains(jsonLines.String(), id) || !strings.Contains(text.String(), id) {
			return fmt.Errorf("the streams have not shown probe %s yet", id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var want []string
	for _, p := range ownedPaths(t, members, "node-2", "/f/rel-", 4) {
		want = append(want, get(p))
	}
	local := ownedPaths(t, members, "node-1", "/f/loc-", 4)
	other := ownedPaths(t, members, "node-2", "/g/rel-", 4)
	for k := range local {
		get(local[k])
		get(other[k])
	}
	err = eventually(ctx, func() error {
		for _, id := range want {
			if !strings.Contains(jsonLines.String(), `"request_id":"`+id+`"`) || !strings.Contains(text.String(), id) {
				return fmt.Errorf("the streams have not shown %s yet", id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(jsonLines.String()), "\n") {
		var rec struct {
			Route, Path string
			Status      int
			Full        *struct {
				Request map[string][]string
				Calls   []struct {
					Kind, Node string
					Status     int
					Calls      []struct {
						Kind   string
						Status int
					}
				}
			}
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if rec.Route != "relayed" || rec.Status != 200 || !strings.HasPrefix(rec.Path, "/f/") || rec.Full == nil {
			t.Fatalf("cachectl log --full --filter %q printed %s", filter, l)
		}
		calls := rec.Full.Calls
		// The owner's calls: the origin, after (within the handoff
		// window of the ring change) the key's previous owner.
		origin := len(calls) == 1 && slices.ContainsFunc(calls[0].Calls, func(c struct {
			Kind   string
			Status int
		}) bool {
			return c.Kind == "origin" && c.Status == 200
		})
		if !origin || calls[0].Kind != "peer" || calls[0].Node != "node-2" || calls[0].Status != 200 || len(rec.Full.Request["User-Agent"]) != 1 {
			t.Fatalf("a relayed miss's full record %s; want its fields, the relay to node-2 and node-2's origin request", l)
		}
	}
	out := text.String()
	for _, line := range []string{"-  ReqHeader   User-Agent: Go-http-client/1.1", "-  Call        peer node-2 200", "-    Call        origin 200",
		"-  RespHeader  Cache-Status: node-2; fwd=uri-miss"} {
		if !strings.Contains(out, line) {
			t.Fatalf("cachectl log --full printed\n%s\nwithout a line %q", out, line)
		}
	}
	if strings.Contains(out, "/f/loc-") || strings.Contains(out, "/g/rel-") {
		t.Fatalf("cachectl log --full --filter %q printed requests it does not select:\n%s", filter, out)
	}
}
