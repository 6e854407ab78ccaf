package dataplane

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// brokenOnce serves a body of size bytes with cacheControl; its answer
// number broken sends the header and half the body, then drops the
// connection.
func brokenOnce(cacheControl string, size, broken int) (http.Handler, *atomic.Int32) {
	var hits atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", cacheControl)
		w.Header().Set("ETag", `"v1"`)
		if int(hits.Add(1)) == broken {
			w.Header().Set("Content-Length", "100000")
			w.Write(make([]byte, size/2))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-body
		}
		w.Write(make([]byte, size))
	}), &hits
}

// A stale-while-revalidate refresh runs in the background, answering no
// client: a body that breaks off there must leave the node serving and
// the stale copy in place.
func TestBrokenBodyInABackgroundRefresh(t *testing.T) {
	h, hits := brokenOnce("max-age=0, stale-while-revalidate=3600", 100000, 2)
	origin := httptest.NewServer(h)
	origin.Config.ErrorLog = nil
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	url := "http://" + n.ClientAddr().String() + "/swr"
	if resp, body := do(t, "GET", url); resp.Header.Get("X-Cache") != "MISS" || len(body) != 100000 {
		t.Fatalf("first read: %s, %d bytes", resp.Header.Get("X-Cache"), len(body))
	}
	// Stale at once: served as it is while a refresh runs, whose body breaks.
	if resp, body := do(t, "GET", url); resp.Header.Get("X-Cache") != "UPDATING" || len(body) != 100000 {
		t.Fatalf("stale read: %s, %d bytes; want UPDATING, the whole stale body", resp.Header.Get("X-Cache"), len(body))
	}
	waitFor(t, "a refresh after the broken one", func() bool {
		resp, body := do(t, "GET", url)
		if len(body) != 100000 {
			t.Fatalf("after the broken refresh: %d %s, %d bytes; want the whole body", resp.StatusCode, resp.Header.Get("X-Cache"), len(body))
		}
		return hits.Load() >= 3
	})
}

// A pre-copy takes hot keys from their previous owners in the background:
// a previous owner whose answer breaks off mid-body must leave the node
// serving, and the key is then fetched whole when a client asks.
func TestBrokenBodyInAPreCopy(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	c := startNode(t, "c", fc.addr, origin.URL, func(c *Config) { c.HotThreshold = 100 })

	// The previous owner of every key is a peer of its own making: it lists
	// one hot key, breaks off its first answer for it, and has no copy
	// after that.
	var path atomic.Pointer[string]
	var handoffs atomic.Int32
	old := &http.Server{Protocols: relay.Protocols(true), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := *path.Load()
		if r.Header.Get(hop.HotKeysField) != "" {
			json.NewEncoder(w).Encode([]map[string]any{{"key": "http127.0.0.1" + p, "host": "127.0.0.1", "uri": p, "rate": 1000}})
			return
		}
		if handoffs.Add(1) > 1 {
			http.Error(w, "not cached", http.StatusGatewayTimeout)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Length", "100000")
		w.Header().Set(hop.PurgeRevisionField, "0") // it has applied every purge
		w.WriteHeader(http.StatusOK)
		w.Write(make([]byte, 50000))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the stream is reset mid-body
	})}
	old.ErrorLog = log.New(io.Discard, "", 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go old.Serve(l)
	defer old.Close()

	e := epochOf(2, c)
	e.Members = append(e.Members, &pb.Member{Id: "old", PeerAddress: l.Addr().String(), State: pb.MemberState_MEMBER_STATE_ACTIVE})
	p := pathOwnedBy(t, e, "/hot/", "c")
	path.Store(&p)
	fc.publish(e) // c's first epoch of a running ring: it pre-copies from "old"
	waitFor(t, "the pre-copy to end", func() bool { return handoffs.Load() >= 1 && !c.owner.Precopying() })
	if _, ok := c.store.Peek("http127.0.0.1" + p); ok {
		t.Fatal("a pre-copy that broke off was stored")
	}
	// A request that joins the broken fill before it has let go gets a 502,
	// never a short body; a later one is fetched whole from the origin.
	waitFor(t, "a whole answer after the broken pre-copy", func() bool {
		resp, body := do(t, "GET", "http://"+c.ClientAddr().String()+p)
		switch {
		case resp.StatusCode == http.StatusBadGateway:
			return false
		case resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "MISS" || o.count(p) != 1:
			t.Fatalf("after the broken pre-copy: %d %s, %d bytes, %d origin requests; want a whole MISS from the origin",
				resp.StatusCode, resp.Header.Get("X-Cache"), len(body), o.count(p))
		}
		return true
	})
}

// A panic in a background task is logged and counted, never fatal.
func TestPanicInABackgroundTaskIsRecovered(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	done := make(chan struct{})
	n.tasks.Go("test", func() {
		defer close(done)
		panic("a bug in a background task")
	})
	<-done
	waitFor(t, "the recovered panic to be counted", func() bool {
		return metricValue(t, n, "shardcache_background_panics_total", `task="test"`) == 1
	})
	if resp, body := do(t, "GET", "http://"+n.ClientAddr().String()+"/after"); resp.StatusCode != 200 || body == "" {
		t.Fatalf("after a background panic: %d", resp.StatusCode)
	}
}

// An upstream answer of unknown length that breaks off mid-body (the
// origin, or an owner whose origin did, dropped the connection) must reach
// the client as a broken transfer, never as a shorter body ended cleanly:
// without a length only an aborted transfer tells the client it is
// incomplete. Each way an upstream body is passed on is tried: relayed from
// the owner, served unstored by the owner, and bypassed to the origin.
func TestAnUpstreamAnswerThatBreaksOffReachesTheClientBroken(t *testing.T) {
	// The origin sends the header and a first part, then waits until the
	// client has them before it drops the connection: the break comes
	// after every node on the way has sent its header.
	var gate atomic.Pointer[chan struct{}]
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/unstored/") {
			w.Header().Set("Cache-Control", "no-store")
		} else {
			w.Header().Set("Cache-Control", "max-age=60")
		}
		w.WriteHeader(http.StatusOK) // no Content-Length: chunked
		w.Write(make([]byte, 16<<10))
		w.(http.Flusher).Flush()
		select {
		case <-*gate.Load():
		case <-r.Context().Done():
		}
		panic(http.ErrAbortHandler) // the origin drops the connection
	}))
	origin.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer origin.Close()
	a, b, e := startPair(t, origin.URL, noHotKeys)
	for _, tt := range []struct {
		name string
		via  *Node
		path string
		hdr  []string
	}{
		{"relayed from the owner", a, pathOwnedBy(t, e, "/relayed/", "b"), nil},
		{"served unstored by the owner", b, pathOwnedBy(t, e, "/unstored/", "b"), nil},
		{"relayed and unstored", a, pathOwnedBy(t, e, "/unstored/", "b"), nil},
		{"bypassed to the origin", a, "/bypass", []string{"Authorization", "Bearer x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			gate.Store(&release)
			req, _ := http.NewRequest(http.MethodGet, "http://"+tt.via.ClientAddr().String()+tt.path, nil)
			for i := 0; i < len(tt.hdr); i += 2 {
				req.Header.Set(tt.hdr[i], tt.hdr[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				close(release)
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, 1024)
			_, err = io.ReadFull(resp.Body, first)
			close(release)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("before the break: %d, %v", resp.StatusCode, err)
			}
			rest, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("an answer that broke off after %d bytes reached the client as a complete 200 (X-Cache %s)", len(first)+len(rest), resp.Header.Get("X-Cache"))
			}
		})
	}
}
