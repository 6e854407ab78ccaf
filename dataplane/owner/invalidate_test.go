package owner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/routes"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// streamedOrigin answers its first fetch with version 1, whose body comes
// through a pipe the test writes, and every later one with version 2 from
// next.
type streamedOrigin struct {
	next  *fakeOrigin
	body  *io.PipeReader
	asked chan struct{} // closed at the first fetch
	n     int
	vary  string // version 1's Vary, if any
}

func (o *streamedOrigin) Fetch(ctx context.Context, r *http.Request, p *policy.Policy, fill bool, extra http.Header) (*http.Response, error) {
	if o.n++; o.n == 1 {
		close(o.asked)
		h := http.Header{"Cache-Control": {"max-age=60"}, "Etag": {`"1"`}, "Content-Length": {"10"}}
		if o.vary != "" {
			h.Set("Vary", o.vary)
		}
		return &http.Response{StatusCode: 200, ContentLength: 10, Body: o.body, Header: h}, nil
	}
	return o.next.Fetch(ctx, r, p, fill, extra)
}

// firstWrite is a response writer that tells when its body begins.
type firstWrite struct {
	*httptest.ResponseRecorder
	began chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	select {
	case <-w.began:
	default:
		close(w.began)
	}
	return w.ResponseRecorder.Write(p)
}

// An invalidation while the key's fill still streams from the origin
// ends that fill for what follows: a request after it fetches the new
// version rather than following the old stream, and the old fill, ending
// after the new one is stored, is not stored over it. (A sliced object's
// head dropped by its assembler used to come back this way, and the
// assembler answered 502: the object changed between slices.)
func TestAnInvalidationEndsTheFillStillStreaming(t *testing.T) {
	pr, pw := io.Pipe()
	origin := &streamedOrigin{next: &fakeOrigin{handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"2"`)
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "version 2!")
	}}, body: pr, asked: make(chan struct{})}
	to := newTestOwner(t, nil, func(c *Config) { c.Origin = origin })
	// A: the fill of version 1, its body half sent; the node's assembler
	// drops it (as a peer's invalidation).
	a, aDone := invalidateHalfFilled(to, origin, pw, request("/inv", nil))
	// What comes after it leads a fill of its own.
	key := request("/inv", nil).Key
	if c, leader := to.flights.Join(key); leader {
		to.flights.Settle(key, c, nil, false)
	} else {
		pw.Write([]byte("on 1!"))
		pw.Close()
		<-aDone
		t.Fatal("a request after the invalidation would follow the fill it invalidated")
	}
	// B, after it: version 2 from the origin.
	b := httptest.NewRecorder()
	to.Serve(b, *request("/inv", nil))
	if got := b.Body.String(); got != "version 2!" {
		t.Fatalf("after the invalidation: %q, want version 2", got)
	}
	for { // B's fill stores version 2 in a goroutine of its own
		if e, ok := to.store.Get(key); ok && e.Header.Get("Etag") == `"2"` {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// A's fill ends now, after version 2 was stored.
	finishHalfFilled(t, to, pw, a, aDone)
	w, _ := to.serve(request("/inv", nil))
	if got := w.Body.String(); got != "version 2!" || !strings.Contains(w.Header().Get("X-Cache"), "HIT") {
		t.Fatalf("once both fills ended: %q (%s); want version 2 from the store", got, w.Header().Get("X-Cache"))
	}
}

// invalidateHalfFilled serves req, whose fill is origin's first fetch,
// until half its body is sent (through pw), then invalidates req's URL as
// a peer would. It returns A's recorder and a channel closed when A's
// answer ends.
func invalidateHalfFilled(to *testOwner, origin *streamedOrigin, pw *io.PipeWriter, req *Request) (*firstWrite, chan struct{}) {
	a := &firstWrite{httptest.NewRecorder(), make(chan struct{})}
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		to.Serve(a, *req)
	}()
	<-origin.asked
	pw.Write([]byte("versi"))
	<-a.began
	inv := request(req.HTTP.URL.Path, req.Policy)
	inv.Hop.From = "b"
	to.Invalidate(*inv, nil)
	return a, aDone
}

// finishHalfFilled sends the rest of A's body and checks that A got
// version 1 whole.
func finishHalfFilled(t *testing.T, to *testOwner, pw *io.PipeWriter, a *firstWrite, aDone chan struct{}) {
	t.Helper()
	pw.Write([]byte("on 1!"))
	pw.Close()
	<-aDone
	to.settled()
	if got := a.Body.String(); got != "version 1!" {
		t.Fatalf("the request before the invalidation: %q, want version 1 whole", got)
	}
}

// An invalidation of a URL while a variant of it is still being fetched
// drops that fill too, though no variant of the URL was stored yet: the
// variant fetched before the invalidation is not found once another
// variant's fill has made the URL vary again.
func TestAnInvalidationDropsTheVariantFillStillStreaming(t *testing.T) {
	pr, pw := io.Pipe()
	origin := &streamedOrigin{next: &fakeOrigin{handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "X-V")
		w.Header().Set("ETag", `"2"`)
		io.WriteString(w, "version 2!")
	}}, body: pr, asked: make(chan struct{}), vary: "X-V"}
	to := newTestOwner(t, nil, func(c *Config) { c.Origin = origin })
	// A: variant a's fill of version 1, its body half sent, then the URL
	// invalidated.
	a, aDone := invalidateHalfFilled(to, origin, pw, request("/var", nil, "X-V", "a"))
	finishHalfFilled(t, to, pw, a, aDone)
	// Variant b makes the URL vary again; then variant a is asked for.
	if w, _ := to.serve(request("/var", nil, "X-V", "b")); w.Body.String() != "version 2!" {
		t.Fatalf("variant b: %q", w.Body.String())
	}
	w, _ := to.serve(request("/var", nil, "X-V", "a"))
	if got := w.Body.String(); got != "version 2!" {
		t.Fatalf("variant a after the invalidation: %q (%s); want version 2 from the origin", got, w.Header().Get("X-Cache"))
	}
}

// A client's unsafe requests each send an invalidation to every peer: at
// most MaxInvalidations are in flight, however fast the requests come and
// however slowly the peers answer. Past the bound a request waits for room
// up to invalidateWait; what it could not send by then is dropped and
// counted, and the request is answered.
func TestInvalidationsInFlightToPeersAreBounded(t *testing.T) {
	const bound = 4
	to := newTestOwner(t, cacheable("x"), func(c *Config) { c.MaxInvalidations = bound })
	release := make(chan struct{})
	var inFlight, most, sent atomic.Int64
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		if h.Get(hop.InvalidateField) == "" {
			t.Errorf("asked a peer for something other than an invalidation: %v", h)
		}
		sent.Add(1)
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release // a peer that does not answer until the test ends
		inFlight.Add(-1)
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody}, nil
	}
	t.Cleanup(func() { close(release) }) // before the owner's tasks stop
	var members []*pb.Member
	for _, id := range []string{"a", "b", "c"} {
		members = append(members, &pb.Member{Id: id, PeerAddress: id + ":1"})
	}
	rt, err := routes.New(&pb.RingEpoch{Epoch: 1, Members: members})
	if err != nil {
		t.Fatal(err)
	}
	// Three POSTs at once, each for two peers: six sends for four places.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			req := request(fmt.Sprintf("/post-%d", i), nil)
			req.HTTP.Method, req.Routes = http.MethodPost, rt
			to.Invalidate(*req, http.Header{})
		})
	}
	wg.Wait() // every request answered, though no peer did
	dropped := testutil.ToFloat64(to.cfg.Metrics.PeerReqs.WithLabelValues("b", "dropped")) +
		testutil.ToFloat64(to.cfg.Metrics.PeerReqs.WithLabelValues("c", "dropped"))
	t.Logf("sent %d (at most %d at once), dropped %v", sent.Load(), most.Load(), dropped)
	if most.Load() > bound || sent.Load() > bound {
		t.Fatalf("%d invalidations sent to peers, %d at once: past the bound of %d in flight", sent.Load(), most.Load(), bound)
	}
	if dropped != 6-float64(sent.Load()) {
		t.Fatalf("%v invalidations counted dropped, want the %d not sent", dropped, 6-sent.Load())
	}
}

// An invalidation that does not reach a peer is logged without the
// query's credentials.
func TestAFailedInvalidationIsLoggedRedacted(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	to := newTestOwner(t, cacheable("x"), func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	})
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		return nil, fmt.Errorf("dialing %s: refused", r.URL)
	}
	rt, err := routes.New(&pb.RingEpoch{Epoch: 1, Members: []*pb.Member{{Id: "a", PeerAddress: "a:1"}, {Id: "b", PeerAddress: "b:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	req := request("/form?token=tok-s3cret", nil)
	req.HTTP.Method, req.Routes = http.MethodPost, rt
	to.Invalidate(*req, http.Header{})
	logged := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "invalidation did not reach a peer")
	}
	for deadline := time.Now().Add(30 * time.Second); !logged(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failed invalidation was not logged")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "tok-s3cret") {
		t.Fatalf("the log carries the query's token: %s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A peer that does not answer holds at most a quarter of the
// invalidations in flight: the other peers are still told of every
// change, where before it took every token and theirs were dropped.
func TestAPeerThatDoesNotAnswerLeavesTheOthersTheirInvalidations(t *testing.T) {
	to := newTestOwner(t, cacheable("x"), func(c *Config) { c.MaxInvalidations = 4 })
	release := make(chan struct{})
	var toC atomic.Int64
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		if addr == "b:1" {
			<-release // blackholed
		} else {
			toC.Add(1)
		}
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody}, nil
	}
	t.Cleanup(func() { close(release) })
	// Four peers: each holds at most a quarter of the bound, one.
	rt, err := routes.New(&pb.RingEpoch{Epoch: 1, Members: []*pb.Member{{Id: "a", PeerAddress: "a:1"}, {Id: "b", PeerAddress: "b:1"},
		{Id: "c", PeerAddress: "c:1"}, {Id: "d", PeerAddress: "d:1"}, {Id: "e", PeerAddress: "e:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	const posts = 6
	for i := range posts {
		req := request(fmt.Sprintf("/post-%d", i), nil)
		req.HTTP.Method, req.Routes = http.MethodPost, rt
		to.Invalidate(*req, http.Header{})
	}
	// Every send to the answering peers was made; each may still be under
	// way when its request stops waiting.
	for deadline := time.Now().Add(30 * time.Second); toC.Load() < 3*posts; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the answering peers were told of %d of %d changes", toC.Load(), 3*posts)
		}
	}
	if dropped := testutil.ToFloat64(to.cfg.Metrics.PeerReqs.WithLabelValues("b", "dropped")); dropped != posts-1 {
		t.Fatalf("%v invalidations to the silent peer dropped, want %d (one in flight, its share)", dropped, posts-1)
	}
}

// The share of a peer that does not answer leaves the bound to the peers
// that do: a ring of two nodes has one peer, and a burst of changes that
// fits MaxInvalidations reaches it whole, as it did before the share.
func TestABurstWithinTheBoundReachesTheOnlyPeer(t *testing.T) {
	const bound = 8
	to := newTestOwner(t, cacheable("x"), func(c *Config) { c.MaxInvalidations = bound })
	var told atomic.Int64
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		time.Sleep(100 * time.Millisecond) // answers, not at once
		told.Add(1)
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody}, nil
	}
	rt, err := routes.New(&pb.RingEpoch{Epoch: 1, Members: []*pb.Member{{Id: "a", PeerAddress: "a:1"}, {Id: "b", PeerAddress: "b:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range bound {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request(fmt.Sprintf("/burst-%d", i), nil)
			req.HTTP.Method, req.Routes = http.MethodPost, rt
			to.Invalidate(*req, http.Header{})
		}()
	}
	wg.Wait()
	if dropped := testutil.ToFloat64(to.cfg.Metrics.PeerReqs.WithLabelValues("b", "dropped")); dropped != 0 {
		t.Fatalf("%v of %d invalidations to the only peer dropped, within a bound of %d in flight; want none", dropped, bound, bound)
	}
	if told.Load() != bound {
		t.Fatalf("the peer was told of %d of %d changes", told.Load(), bound)
	}
}
