package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
	"github.com/shardcache/shardcache/sdk/ring"
)

// fakeControl is a hand-written NodeService: it answers every hello with a
// snapshot of the epoch it holds and pushes each new epoch to every session.
type fakeControl struct {
	pb.UnimplementedNodeServiceServer
	mu       sync.Mutex
	epoch    *pb.RingEpoch
	policies *pb.PolicySet // sent with the snapshot
	wake     chan struct{}
	hellos   atomic.Int32
	acks     chan *pb.PolicyAck
	addr     string
	srv      *grpc.Server
	// purges are sent in order: those after a hello's revision with the
	// snapshot, new ones as pushes; results gets the nodes' answers.
	purges        []*pb.Purge
	results       chan *pb.PurgeResult
	helloPurgeRev atomic.Int64
	// held are the node ids whose epoch pushes are held back, as from a
	// lagging replica; they get the epoch when they ask for it.
	held sync.Map
	// refusal, when set, ends every session: a new one at its hello, an
	// open one at once.
	refusal atomic.Pointer[error]
}

// refuse makes every session end with err (nil: admit them again).
func (f *fakeControl) refuse(err error) {
	if err == nil {
		f.refusal.Store(nil)
	} else {
		f.refusal.Store(&err)
	}
	f.mu.Lock()
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

// refused is the error sessions end with now, nil when they are admitted.
func (f *fakeControl) refused() error {
	if err := f.refusal.Load(); err != nil {
		return *err
	}
	return nil
}

// pushPurge records p and sends it to every session.
func (f *fakeControl) pushPurge(p *pb.Purge) {
	f.mu.Lock()
	f.purges = append(f.purges, p)
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

// purgesAfter returns the recorded purges after revision rev.
func (f *fakeControl) purgesAfter(rev int64) []*pb.Purge {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*pb.Purge
	for _, p := range f.purges {
		if p.GetRevision() > rev {
			out = append(out, p)
		}
	}
	return out
}

func startFakeControl(t testing.TB, addr string) *fakeControl {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeControl{wake: make(chan struct{}), addr: l.Addr().String(), srv: grpc.NewServer(), acks: make(chan *pb.PolicyAck, 16),
		results: make(chan *pb.PurgeResult, 64)}
	pb.RegisterNodeServiceServer(f.srv, f)
	go f.srv.Serve(l)
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeControl) publish(e *pb.RingEpoch) {
	f.mu.Lock()
	f.epoch = e
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

// missedPerMessage is how many missed purges the fake control plane sends
// in one message.
const missedPerMessage = 10000

func (f *fakeControl) Session(stream pb.NodeService_SessionServer) error {
	req, err := stream.Recv()
	if err != nil || req.GetHello() == nil {
		return fmt.Errorf("no hello: %v", err)
	}
	f.hellos.Add(1)
	if err := f.refused(); err != nil {
		return err
	}
	f.helloPurgeRev.Store(req.GetHello().GetPurgeRevision())
	f.mu.Lock()
	e, ps, wake := f.epoch, f.policies, f.wake
	f.mu.Unlock()
	purges := f.purgesAfter(req.GetHello().GetPurgeRevision())
	sent := req.GetHello().GetPurgeRevision()
	if len(purges) > 0 {
		sent = purges[len(purges)-1].GetRevision()
	}
	// As the control plane does, purges past one message's worth go ahead
	// of the snapshot.
	for len(purges) > missedPerMessage {
		msg := &pb.SessionResponse{Msg: &pb.SessionResponse_MissedPurges{MissedPurges: &pb.MissedPurges{Purges: purges[:missedPerMessage]}}}
		if err := stream.Send(msg); err != nil {
			return err
		}
		purges = purges[missedPerMessage:]
	}
	snap := &pb.Snapshot{Epoch: e, Policies: ps, Purges: purges}
	if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}); err != nil {
		return err
	}
	id := req.GetHello().GetMember().GetId()
	asked := make(chan struct{}, 1)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			req, err := stream.Recv()
			if err != nil {
				return
			}
			if req.GetEpochRequest() != nil {
				select {
				case asked <- struct{}{}:
				default:
				}
			}
			if ack := req.GetPolicyAck(); ack != nil {
				f.acks <- ack
			}
			if r := req.GetPurgeResult(); r != nil {
				f.results <- r
			}
		}
	}()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-gone: // the node said goodbye
			return nil
		case <-asked:
			f.mu.Lock()
			next := f.epoch
			f.mu.Unlock()
			if next != e {
				e = next
				if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Epoch{Epoch: e}}); err != nil {
					return err
				}
			}
		case <-wake:
			if err := f.refused(); err != nil {
				return err
			}
			f.mu.Lock()
			next := f.epoch
			wake = f.wake
			f.mu.Unlock()
			if _, held := f.held.Load(id); held {
				next = e
			}
			if next != e {
				e = next
				if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Epoch{Epoch: e}}); err != nil {
					return err
				}
			}
			for _, p := range f.purgesAfter(sent) {
				if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Purge{Purge: p}}); err != nil {
					return err
				}
				sent = p.GetRevision()
			}
		}
	}
}

// testOrigin counts requests per path; gate, when set, holds responses.
type testOrigin struct {
	counts sync.Map // path -> *atomic.Int32
	gate   chan struct{}
	header http.Header
}

func (o *testOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := o.counts.LoadOrStore(r.URL.Path, new(atomic.Int32))
	c.(*atomic.Int32).Add(1)
	if o.gate != nil {
		<-o.gate
	}
	for k, v := range o.header {
		w.Header()[k] = v
	}
	if w.Header().Get("Cache-Control") == "" {
		w.Header().Set("Cache-Control", "max-age=60")
	}
	w.Header().Set("X-Seen-Forwarded-For", r.Header.Get("X-Forwarded-For"))
	switch {
	case strings.HasPrefix(r.URL.Path, "/plain/"):
		w.Header().Del("Cache-Control") // no freshness of its own
	case strings.HasPrefix(r.URL.Path, "/missing/"):
		w.WriteHeader(http.StatusNotFound)
	}
	io.WriteString(w, "body of "+r.URL.Path)
}

func (o *testOrigin) count(path string) int32 {
	c, ok := o.counts.Load(path)
	if !ok {
		return 0
	}
	return c.(*atomic.Int32).Load()
}

// startNode runs a node on ephemeral ports until the test ends.
func startNode(t testing.TB, id, control, origin string, opts ...func(*Config)) *Node {
	t.Helper()
	n, _ := runNode(t, id, control, origin, opts...)
	return n
}

// runNode is startNode that also returns a function stopping the node
// before the test ends (it waits for Run to return).
func runNode(t testing.TB, id, control, origin string, opts ...func(*Config)) (*Node, func()) {
	t.Helper()
	cfg := Config{
		ID: id, ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", OpsAddr: "127.0.0.1:0",
		ControlPlane: control, Origin: origin, MemoryBytes: 16 << 20, MaxObjectBytes: 1 << 20,
		DrainGrace: -1, // a test's nodes stop together at its end
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	<-n.Ready()
	return n, stop
}

// startPair starts nodes a and b in epoch 1 of a fake control plane.
func startPair(t *testing.T, origin string, opts ...func(*Config)) (a, b *Node, e *pb.RingEpoch) {
	t.Helper()
	_, a, b = startPairOn(t, origin, opts...)
	return a, b, epochOf(1, a, b)
}

// startPairOn is startPair that returns the fake control plane, for a test
// to publish later epochs on.
func startPairOn(t *testing.T, origin string, opts ...func(*Config)) (fc *fakeControl, a, b *Node) {
	t.Helper()
	fc = startFakeControl(t, "127.0.0.1:0")
	a = startNode(t, "a", fc.addr, origin, opts...)
	b = startNode(t, "b", fc.addr, origin, opts...)
	fc.publish(epochOf(1, a, b))
	waitEpoch(t, a, 1)
	waitEpoch(t, b, 1)
	return fc, a, b
}

func epochOf(num uint64, nodes ...*Node) *pb.RingEpoch {
	e := &pb.RingEpoch{Epoch: num}
	for _, n := range nodes {
		e.Members = append(e.Members, &pb.Member{Id: n.ID(), PeerAddress: n.PeerAddr().String(), PublicUrl: "http://" + n.ClientAddr().String(),
			State: pb.MemberState_MEMBER_STATE_ACTIVE})
	}
	return e
}

// startOne starts a node "a" alone in epoch 1 of a fake control plane.
func startOne(t testing.TB, origin string, opts ...func(*Config)) (*fakeControl, *Node) {
	t.Helper()
	fc := startFakeControl(t, "127.0.0.1:0")
	n := startNode(t, "a", fc.addr, origin, opts...)
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	return fc, n
}

// waitFor polls cond, the outcome of work in the background, until it
// holds; after 30 s the test fails with what it waited for.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitEpoch(t testing.TB, n *Node, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Epoch() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s serves epoch %d, want %d", n.ID(), n.Epoch(), want)
		}
		time.Sleep(5 * time.Millisecond) // polling the session's apply
	}
}

func do(t *testing.T, method, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := newRequest(method, url, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// newRequest is a request with the fields hdr names (name, value, ...); a
// "Host" among them is the request's Host.
func newRequest(method, url string, hdr ...string) (*http.Request, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return req, nil
}

func metricValue(t *testing.T, n *Node, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.OpsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if match {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// pathOwnedBy finds a path under prefix whose key the ring gives to owner.
func pathOwnedBy(t *testing.T, e *pb.RingEpoch, prefix, owner string) string {
	t.Helper()
	return hostPathOwnedBy(t, e, "127.0.0.1", prefix, owner)
}

// hostPathOwnedBy is pathOwnedBy for requests naming host.
func hostPathOwnedBy(t *testing.T, e *pb.RingEpoch, host, prefix, owner string) string {
	t.Helper()
	r := mustRing(t, e)
	for i := range 10000 {
		p := fmt.Sprintf("%sk%d", prefix, i)
		if r.Owner("http"+host+p).ID == owner {
			return p
		}
	}
	t.Fatalf("no key under %s owned by %s", prefix, owner)
	return ""
}

func TestNotReadyUntilEpoch(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL)
	ready := "http://" + n.OpsAddr().String() + "/readyz"
	if resp, body := do(t, "GET", ready); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before any epoch: %d %s", resp.StatusCode, body)
	}
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	if resp, body := do(t, "GET", ready); resp.StatusCode != 200 || !strings.Contains(body, "epoch=1 members=1 ") {
		t.Fatalf("/readyz after epoch 1: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, "GET", "http://"+n.OpsAddr().String()+"/healthz"); resp.StatusCode != 200 {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
}

// A node whose control plane says it is not a member (its record was
// deleted, or another process holds its id) is not ready, with the reason,
// until it is admitted again; it keeps serving meanwhile.
func TestNotReadyWhileNotAMember(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	fc, n := startOne(t, origin.URL)
	ready := "http://" + n.OpsAddr().String() + "/readyz"
	if resp, body := do(t, "GET", ready); resp.StatusCode != 200 || metricValue(t, n, "shardcache_member") != 1 {
		t.Fatalf("/readyz as a member: %d %s (shardcache_member %v)", resp.StatusCode, body, metricValue(t, n, "shardcache_member"))
	}

	st, _ := status.New(codes.FailedPrecondition, "the member record of a was deleted").
		WithDetails(&errdetails.ErrorInfo{Reason: pb.SessionEnd_SESSION_END_RECORD_DELETED.String(), Domain: pb.SessionEndDomain})
	fc.refuse(st.Err())
	var body string
	waitFor(t, "/readyz to say 503", func() bool {
		var resp *http.Response
		resp, body = do(t, "GET", ready)
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "not a member") || !strings.Contains(body, "the member record of a was deleted") {
		t.Fatalf("/readyz while not a member: %s", body)
	}
	if got := metricValue(t, n, "shardcache_member"); got != 0 {
		t.Fatalf("shardcache_member %v while not a member", got)
	}
	if got := metricValue(t, n, "shardcache_membership_lost_total", `cause="record_deleted"`); got < 1 {
		t.Fatalf("shardcache_membership_lost_total{cause=record_deleted} = %v", got)
	}
	if resp, _ := do(t, "GET", "http://"+n.ClientAddr().String()+"/still-serving"); resp.StatusCode != 200 {
		t.Fatalf("a node that is not a member stopped serving: %d", resp.StatusCode)
	}

	fc.refuse(nil)
	waitFor(t, "/readyz to say 200 once admitted again", func() bool { resp, _ := do(t, "GET", ready); return resp.StatusCode == 200 })
	if got := metricValue(t, n, "shardcache_member"); got != 1 {
		t.Fatalf("shardcache_member %v once a member again", got)
	}
}

func TestConcurrentMissesCollapse(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{gate: make(chan struct{})}
	origin := httptest.NewServer(o)
	defer origin.Close()
	n := startNode(t, "a", fc.addr, origin.URL)
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)

	const clients = 20
	url := "http://" + n.ClientAddr().String() + "/obj/x"
	var wg sync.WaitGroup
	statuses := make(chan string, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := do(t, "GET", url)
			if resp.StatusCode != 200 || body != "body of /obj/x" {
				t.Errorf("status %d body %q", resp.StatusCode, body)
			}
			statuses <- resp.Header.Get("X-Cache")
		}()
	}
	// Release the origin only once the fill reached it and every other
	// client waits on that fill.
	deadline := time.Now().Add(10 * time.Second)
	for o.count("/obj/x") != 1 || n.owner.Waiting() != clients-1 {
		if time.Now().After(deadline) {
			t.Fatalf("origin saw %d requests and %d clients wait; want 1 and %d", o.count("/obj/x"), n.owner.Waiting(), clients-1)
		}
		time.Sleep(2 * time.Millisecond) // polling the node's own counters
	}
	close(o.gate)
	wg.Wait()
	close(statuses)
	if got := o.count("/obj/x"); got != 1 {
		t.Fatalf("origin saw %d requests for one key, want 1", got)
	}
	misses := 0
	for s := range statuses {
		if s == "MISS" {
			misses++
		}
	}
	if misses != 1 {
		t.Fatalf("%d MISS responses, want exactly 1 (the fill)", misses)
	}
	if resp, _ := do(t, "GET", url); resp.Header.Get("X-Cache") != "HIT" || resp.Header.Get("X-Cache-Node") != "a" {
		t.Fatalf("after the fill: X-Cache %q from %q, want HIT from a", resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
	}
}

// noHotKeys turns hot-key handling off, so every request takes the plain route.
func noHotKeys(c *Config) { c.HotThreshold = -1 }

func noHandoff(c *Config) { c.HandoffWindow = -1 }

func TestRelayToOwnerOverOnePooledConnection(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, _, e := startPair(t, origin.URL, noHotKeys)

	path := pathOwnedBy(t, e, "/k/", "b")
	const n = 10
	for i := range n {
		// A client's forged hop header must be ignored, not trusted.
		resp, body := do(t, "GET", "http://"+a.ClientAddr().String()+path, "X-Shardcache-Hop", "forged")
		if resp.StatusCode != 200 || body != "body of "+path {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Cache-Node"); got != "b" {
			t.Fatalf("request %d served by %q, want owner b", i, got)
		}
		if want := map[bool]string{true: "MISS", false: "HIT"}[i == 0]; resp.Header.Get("X-Cache") != want {
			t.Fatalf("request %d: X-Cache %q, want %s", i, resp.Header.Get("X-Cache"), want)
		}
		if i == 0 && resp.Header.Get("X-Seen-Forwarded-For") != "127.0.0.1" {
			// The chain names the client once: the peer hop is not a proxy.
			t.Fatalf("origin saw X-Forwarded-For %q, want the client's address", resp.Header.Get("X-Seen-Forwarded-For"))
		}
	}
	if got := o.count(path); got != 1 {
		t.Fatalf("origin saw %d requests, want 1", got)
	}
	// A request is counted as its handler ends, just after the answer.
	waitFor(t, fmt.Sprintf("a to count %d relayed requests", n), func() bool {
		return metricValue(t, a, "shardcache_requests_total", `route="relayed"`) == float64(n)
	})
	opened := metricValue(t, a, "shardcache_peer_connections_total", `state="opened"`)
	reused := metricValue(t, a, "shardcache_peer_connections_total", `state="reused"`)
	if opened != 1 || reused != n-1 {
		t.Fatalf("peer connections: %v opened, %v reused; want 1 and %d", opened, reused, n-1)
	}
}

func TestRelayFallsBackWhenOwnerIsDown(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a := startNode(t, "a", fc.addr, origin.URL)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	e := epochOf(1, a)
	e.Members = append(e.Members, &pb.Member{Id: "gone", PeerAddress: deadAddr, State: pb.MemberState_MEMBER_STATE_ACTIVE})
	fc.publish(e)
	waitEpoch(t, a, 1)

	path := pathOwnedBy(t, e, "/k/", "gone")
	resp, body := do(t, "GET", "http://"+a.ClientAddr().String()+path)
	if resp.StatusCode != 200 || body != "body of "+path || resp.Header.Get("X-Cache-Node") != "a" {
		t.Fatalf("with the owner down: %d %q from %q; want 200 served by a", resp.StatusCode, body, resp.Header.Get("X-Cache-Node"))
	}
	if got := metricValue(t, a, "shardcache_relay_fallbacks_total"); got != 1 {
		t.Fatalf("relay fallbacks = %v, want 1", got)
	}
}

func TestPeerListenerOnlyServesRelayedRequests(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	a := startNode(t, "a", fc.addr, origin.URL)
	// HTTP/1.1, even with the hop marker, is answered 505 and nothing else.
	resp, _ := do(t, "GET", "http://"+a.PeerAddr().String()+"/x", hop.Marker, "b")
	if resp.StatusCode != http.StatusHTTPVersionNotSupported {
		t.Fatalf("HTTP/1.1 on the peer listener: %d, want 505", resp.StatusCode)
	}
	unmarkedPeerRequest(t, a)
	if o := origin.Config.Handler.(*testOrigin); o.count("/x") != 0 {
		t.Fatalf("a refused peer request reached the origin %d times", o.count("/x"))
	}
	for reason, want := range map[string]float64{"http1": 1, "no_hop": 1} {
		if got := metricValue(t, a, "shardcache_peer_refused_total", `reason="`+reason+`"`); got != want {
			t.Fatalf("peer requests refused for %s: %v, want %v", reason, got, want)
		}
	}
}

// Whoever reaches a peer listener may send it refused requests as fast as
// it likes: each is counted, but the node's log takes a bounded number of
// lines for them, not one a request.
func TestRefusedPeerRequestsWriteABoundedLog(t *testing.T) {
	var logs syncBuffer
	_, a := startOne(t, "http://127.0.0.1:1", func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	const n = 200
	for range n {
		unmarkedPeerRequest(t, a)
	}
	if got := metricValue(t, a, "shardcache_peer_refused_total", `reason="no_hop"`); got != n {
		t.Fatalf("peer requests refused: %v, want %d", got, n)
	}
	if lines := strings.Count(logs.String(), "refused a peer request"); lines == 0 || lines > n/10 {
		t.Fatalf("%d refused peer requests wrote %d log lines; want some, and at most %d", n, lines, n/10)
	}
}

// One address (a member, or anyone reaching an h2c peer listener) cannot
// hold the node's descriptors with thousands of peer connections: past
// the bound a connection is closed at once and counted, and relays still
// go through.
func TestPeerConnectionsPerAddressAreBounded(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	const bound, extra = 200, 50
	a, _, e := startPair(t, origin.URL, noHotKeys, noHandoff, func(c *Config) { c.PeerMaxConnsPerAddr = bound })
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range bound + extra {
		c, err := net.Dial("tcp", a.PeerAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	refused := func() float64 { return metricValue(t, a, "shardcache_peer_refused_total", `reason="conns"`) }
	waitFor(t, "the connections past the bound to be refused", func() bool { return refused() >= extra })
	if got := refused(); got != extra {
		t.Fatalf("peer connections refused: %v, want %d", got, extra)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	// Once they are closed, a member's relay is served again.
	h2c := &http.Client{Transport: &http.Transport{Protocols: relay.Protocols(false)}}
	defer h2c.CloseIdleConnections()
	path := pathOwnedBy(t, e, "/conns/", "a")
	waitFor(t, "a relayed request to be served", func() bool {
		req, _ := http.NewRequest("GET", "http://"+a.PeerAddr().String()+path, nil)
		req.Header.Set(hop.Marker, "b")
		resp, err := h2c.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func TestBypassAndUncacheable(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a := startNode(t, "a", fc.addr, origin.URL)
	fc.publish(epochOf(1, a))
	waitEpoch(t, a, 1)
	base := "http://" + a.ClientAddr().String()

	tests := []struct {
		name, method, path string
		hdr                []string
		wantCache          string
	}{
		{"POST", "POST", "/post", nil, "BYPASS"},
		// RFC 9111 3.5: through the cache, but a response that is not
		// public (nor s-maxage, must-revalidate) is not stored.
		{"Authorization", "GET", "/auth", []string{"Authorization", "Bearer x"}, "MISS"},
		{"request no-store", "GET", "/nostore", []string{"Cache-Control", "no-store"}, "BYPASS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 {
				resp, _ := do(t, tt.method, base+tt.path, tt.hdr...)
				if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != tt.wantCache {
					t.Fatalf("%d X-Cache %q, want 200 %s", resp.StatusCode, resp.Header.Get("X-Cache"), tt.wantCache)
				}
			}
			if got := o.count(tt.path); got != 2 {
				t.Fatalf("origin saw %d requests, want 2 (never cached)", got)
			}
		})
	}

	o.header = http.Header{"Cache-Control": {"private, max-age=60"}}
	for range 2 {
		if resp, _ := do(t, "GET", base+"/private"); resp.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("private response: X-Cache %q, want MISS", resp.Header.Get("X-Cache"))
		}
	}
	if got := o.count("/private"); got != 2 {
		t.Fatalf("a private response was served from the cache (%d origin requests, want 2)", got)
	}
}

func TestSessionReconnectsAndKeepsServing(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	addr := fc.addr
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	a := startNode(t, "a", addr, origin.URL)
	fc.publish(epochOf(1, a))
	waitEpoch(t, a, 1)

	fc.srv.Stop() // the control plane goes away
	if resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+"/still"); resp.StatusCode != 200 {
		t.Fatalf("without a control plane: status %d, want 200", resp.StatusCode)
	}
	fc2 := startFakeControl(t, addr)
	fc2.publish(epochOf(2, a))
	waitEpoch(t, a, 2)
	if fc2.hellos.Load() < 1 {
		t.Fatal("the node did not say hello to the returning control plane")
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		c := Config{ID: "n1", ControlPlane: "127.0.0.1:7070", Origin: "http://127.0.0.1:8090"}
		c.setDefaults()
		return c
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"bad id", func(c *Config) { c.ID = "a/b" }, "node id"},
		{"client without port", func(c *Config) { c.ClientAddr = "127.0.0.1" }, "client address"},
		{"no origin", func(c *Config) { c.Origin = "" }, "origin URL is empty"},
		{"origin without scheme", func(c *Config) { c.Origin = "127.0.0.1:8090" }, "origin URL"},
		{"tiny memory", func(c *Config) { c.MemoryBytes = 1000 }, "memory budget"},
		{"object above half the disk", func(c *Config) { c.MaxObjectBytes = c.DiskBytes/2 + 1 }, "max object size"},
		{"memory object above half the memory", func(c *Config) { c.MemoryMaxObject = c.MemoryBytes/2 + 1 }, "largest object in memory"},
		{"tiny disk", func(c *Config) { c.DiskBytes = 1000 }, "disk budget"},
		{"hot copies above half the memory", func(c *Config) { c.HotCopyBytes = c.MemoryBytes/2 + 1 }, "hot copy memory"},
		{"relay shorter than origin", func(c *Config) { c.RelayTimeout = c.OriginTimeout }, "relay timeout"},
		{"zone with a control character", func(c *Config) { c.Zone = "eu-1\x1b[2J" }, "zone"},
		{"control plane off loopback in cleartext", func(c *Config) { c.ControlPlane = "localhost:7070,cp.example:7070" },
			"control plane cp.example:7070 is not on a loopback address, and no TLS is set"},
		{"control plane off loopback over TLS", func(c *Config) { c.ControlPlane, c.ControlPlaneTLS = "cp.example:7070", &tls.Config{} }, ""},
		{"control plane off loopback in cleartext on purpose", func(c *Config) { c.ControlPlane, c.InsecureControlPlane = "cp.example:7070", true }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func TestCacheKey(t *testing.T) {
	tests := []struct{ host, uri, want string }{
		{"Example.COM:8080", "/a?b=1", "httpexample.com/a?b=1"},
		{"example.com.", "/", "httpexample.com/"},
		{"[::1]:80", "/x", "http::1/x"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://"+tt.host+tt.uri, nil)
		if got := policy.Default.Key("http", r); got != tt.want {
			t.Errorf("cacheKey(%s%s) = %q, want %q", tt.host, tt.uri, got, tt.want)
		}
	}
}

func TestPolicyModesAndOverrides(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, b, e := startPair(t, origin.URL)
	set := &pb.PolicySet{Revision: 7, Policies: []*pb.CachePolicy{
		{Name: "bypass", PathPrefix: "/bypass/", Mode: pb.CacheMode_CACHE_MODE_BYPASS},
		{Name: "local", PathPrefix: "/local/", Mode: pb.CacheMode_CACHE_MODE_LOCAL},
		{Name: "redirect", PathPrefix: "/redir/", Mode: pb.CacheMode_CACHE_MODE_REDIRECT},
		{Name: "missing", PathPrefix: "/missing/", ExcludedStatuses: []*pb.StatusRange{{From: 404, To: 404}}},
		{Name: "plain", PathPrefix: "/plain/", StatusTtls: []*pb.StatusTTL{{StatusFrom: 200, StatusTo: 299, Ttl: durationpb.New(time.Minute)}}},
		{Name: "noquery", PathPrefix: "/q/", KeyTemplate: "$scheme$host$uri"},
		{Name: "cookies", PathPrefix: "/app/", Bypass: []*pb.BypassRule{{Cookies: []string{"session"}}}},
	}}
	for _, n := range []*Node{a, b} {
		if err := n.ApplyPolicies(set); err != nil {
			t.Fatal(err)
		}
	}
	base := "http://" + a.ClientAddr().String()
	get := func(path string, hdr ...string) *http.Response {
		resp, _ := do(t, "GET", base+path, hdr...)
		return resp
	}

	t.Run("bypass mode", func(t *testing.T) {
		for range 2 {
			if c := get("/bypass/x").Header.Get("X-Cache"); c != "BYPASS" {
				t.Fatalf("X-Cache %q, want BYPASS", c)
			}
		}
		if n := o.count("/bypass/x"); n != 2 {
			t.Fatalf("origin saw %d, want 2", n)
		}
	})
	t.Run("local mode serves a key owned elsewhere", func(t *testing.T) {
		path := pathOwnedBy(t, e, "/local/", "b")
		if resp := get(path); resp.Header.Get("X-Cache-Node") != "a" {
			t.Fatalf("local mode: served by %q, want a", resp.Header.Get("X-Cache-Node"))
		}
		if resp := get(path); resp.Header.Get("X-Cache") != "HIT" || resp.Header.Get("X-Cache-Node") != "a" {
			t.Fatalf("local mode, again: %s from %s", resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
		}
	})
	t.Run("redirect mode", func(t *testing.T) {
		path := pathOwnedBy(t, e, "/redir/", "b")
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noFollow.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := "http://" + b.ClientAddr().String() + path
		if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
			t.Fatalf("redirect: %d to %q, want 307 to %q", resp.StatusCode, resp.Header.Get("Location"), want)
		}
		followed, body := do(t, "GET", base+path)
		if followed.StatusCode != 200 || body != "body of "+path || followed.Header.Get("X-Cache-Node") != "b" {
			t.Fatalf("following the redirect: %d %q from %q", followed.StatusCode, body, followed.Header.Get("X-Cache-Node"))
		}
	})
	t.Run("excluded status is not stored", func(t *testing.T) {
		get("/missing/x")
		get("/missing/x")
		if n := o.count("/missing/x"); n != 2 {
			t.Fatalf("origin saw %d requests for an excluded 404, want 2", n)
		}
	})
	t.Run("status TTL caches a response without freshness", func(t *testing.T) {
		get("/plain/x")
		if c := get("/plain/x").Header.Get("X-Cache"); c != "HIT" {
			t.Fatalf("X-Cache %q, want HIT under the policy's 200 TTL", c)
		}
	})
	t.Run("key template without the query", func(t *testing.T) {
		get("/q/x?a=1")
		if c := get("/q/x?a=2").Header.Get("X-Cache"); c != "HIT" {
			t.Fatalf("X-Cache %q, want HIT: the template ignores the query", c)
		}
	})
	t.Run("bypass rule on a cookie", func(t *testing.T) {
		if c := get("/app/x", "Cookie", "session=1").Header.Get("X-Cache"); c != "BYPASS" {
			t.Fatalf("with the cookie: X-Cache %q, want BYPASS", c)
		}
		if c := get("/app/x").Header.Get("X-Cache"); c == "BYPASS" {
			t.Fatal("without the cookie the request bypassed")
		}
	})
}

func mustRing(t *testing.T, e *pb.RingEpoch) *ring.Ring {
	t.Helper()
	var members []ring.Member
	for _, m := range e.GetMembers() {
		members = append(members, ring.Member{ID: m.GetId()})
	}
	r, err := ring.New(e.GetEpoch(), members)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPolicyPushIsAcknowledgedOrRefused(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	fc.policies = &pb.PolicySet{Revision: 5, Policies: []*pb.CachePolicy{{Name: "all", PathPrefix: "/"}}}
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	a := startNode(t, "a", fc.addr, origin.URL)
	select {
	case ack := <-fc.acks:
		if ack.GetAppliedRevision() != 5 || ack.GetRefusedRevision() != 0 {
			t.Fatalf("ack %v, want revision 5 applied", ack)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no acknowledgement of the snapshot's policies")
	}
	if a.PolicyRevision() != 5 {
		t.Fatalf("node runs revision %d, want 5", a.PolicyRevision())
	}
	// A set the node cannot run is refused; the set in force stays.
	if err := a.ApplyPolicies(&pb.PolicySet{Revision: 6, Policies: []*pb.CachePolicy{{Name: "bad", Mode: 42}}}); err == nil {
		t.Fatal("a policy with an unknown mode was applied")
	}
	if err := a.ApplyPolicies(&pb.PolicySet{Revision: 9, Incremental: true, SinceRevision: 8}); err == nil {
		t.Fatal("an incremental push with a gap was applied")
	}
	if a.PolicyRevision() != 5 {
		t.Fatalf("after refusals the node runs %d, want 5", a.PolicyRevision())
	}
}

// ownersOf returns key's first n owners in the epoch.
func ownersOf(t *testing.T, e *pb.RingEpoch, key string, n int) []string {
	t.Helper()
	var ids []string
	for _, m := range mustRing(t, e).Owners(key, n) {
		ids = append(ids, m.ID)
	}
	return ids
}

func TestHotKeyReplicasAndCopies(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	// A key is hot at a node once it has seen a few requests for it within
	// the sketch's period (each counts about 13 a minute).
	nodes, e := startHotTrio(t, fc, origin.URL, 35)
	path := "/hot/1"
	owners := ownersOf(t, e, "http127.0.0.1"+path, 3)
	first, second, other := nodes[owners[0]], nodes[owners[1]], nodes[owners[2]]
	via := func(n *Node) *http.Response {
		resp, body := do(t, "GET", "http://"+n.ClientAddr().String()+path)
		if resp.StatusCode != 200 || body != "body of "+path {
			t.Fatalf("via %s: %d %q", n.ID(), resp.StatusCode, body)
		}
		return resp
	}
	// servedBy sends requests through n until one is served by want (the key
	// turning hot there), within a bound.
	servedBy := func(n *Node, want string) *http.Response {
		for range 20 {
			if resp := via(n); resp.Header.Get("X-Cache-Node") == want {
				return resp
			}
		}
		t.Fatalf("20 requests via %s: none served by %s", n.ID(), want)
		return nil
	}

	// Cold: the key has one owner, and the second owner relays to it,
	// keeping a copy (the copies have room): its next request is answered
	// here, not relayed until the key is hot.
	if got := via(second).Header.Get("X-Cache-Node"); got != first.ID() {
		t.Fatalf("cold key via %s served by %s, want the first owner %s", second.ID(), got, first.ID())
	}
	if resp := via(second); resp.Header.Get("X-Cache-Node") != second.ID() || resp.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("cold key via second owner %s again: %s from %s, want a HIT from its copy", second.ID(), resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
	}
	// Cold at a non-owner: the same.
	if got := via(other).Header.Get("X-Cache-Node"); got != first.ID() {
		t.Fatalf("cold key via non-owner %s served by %s, want the first owner %s", other.ID(), got, first.ID())
	}
	if resp := via(other); resp.Header.Get("X-Cache-Node") != other.ID() || resp.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("cold key via non-owner %s again: %s from %s, want a HIT from its copy", other.ID(), resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
	}
	// Hot at a non-owner: after relaying, it keeps a copy and serves it.
	if resp := servedBy(other, other.ID()); resp.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("hot key via non-owner %s: %s, want a HIT from its copy", other.ID(), resp.Header.Get("X-Cache"))
	}
	if n := o.count(path); n != 1 {
		t.Fatalf("the origin saw %d requests for the hot key, want 1", n)
	}
	// Hot at the second owner, which holds no copy (made hot by HEADs,
	// which leave none): it serves from its own store, filled from the
	// first owner, not the origin.
	path2 := "/hot/2"
	owners2 := ownersOf(t, e, "http127.0.0.1"+path2, 3)
	first2, second2 := nodes[owners2[0]], nodes[owners2[1]]
	if resp, _ := do(t, "GET", "http://"+first2.ClientAddr().String()+path2); resp.StatusCode != 200 {
		t.Fatalf("GET %s via its owner: %d", path2, resp.StatusCode)
	}
	for range 3 {
		if resp, _ := do(t, "HEAD", "http://"+second2.ClientAddr().String()+path2); resp.StatusCode != 200 {
			t.Fatalf("HEAD %s via %s: %d", path2, second2.ID(), resp.StatusCode)
		}
	}
	if resp, body := do(t, "GET", "http://"+second2.ClientAddr().String()+path2); resp.Header.Get("X-Cache-Node") != second2.ID() || body != "body of "+path2 {
		t.Fatalf("hot key via its second owner %s: served by %s, %q", second2.ID(), resp.Header.Get("X-Cache-Node"), body)
	}
	if n := o.count(path2); n != 1 {
		t.Fatalf("the origin saw %d requests for %s, want 1", n, path2)
	}
	if metricValue(t, second2, "shardcache_hot_key_events_total", `event="replica_fill"`) != 1 ||
		metricValue(t, other, "shardcache_hot_key_events_total", `event="copy_admitted"`) < 1 ||
		metricValue(t, other, "shardcache_hot_key_events_total", `event="copy_hit"`) < 1 {
		t.Fatal("hot-key events were not counted")
	}
}

func TestOwnerStoppedUnderLoadGivesNoClientErrors(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a := startNode(t, "a", fc.addr, origin.URL, noHotKeys)
	c := startNode(t, "c", fc.addr, origin.URL, noHotKeys)
	// b runs until the test stops it, like a pod deleted under load.
	b, stopB := runNode(t, "b", fc.addr, origin.URL, noHotKeys)
	e := epochOf(1, a, b, c)
	fc.publish(e)
	for _, n := range []*Node{a, b, c} {
		waitEpoch(t, n, 1)
	}

	var sent, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(fmt.Sprintf("http://%s/k/%d-%d", a.ClientAddr(), w, i%50))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	// Let load reach b, then stop it while requests keep coming.
	for metricValue(t, a, "shardcache_peer_requests_total", `peer="b"`) < 20 {
		time.Sleep(5 * time.Millisecond) // polling a's own counter
	}
	stopB()
	// Keep the load on until a has routed around b many times.
	for metricValue(t, a, "shardcache_relay_fallbacks_total") < 50 {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d client requests failed after the owner stopped", failed.Load(), sent.Load())
	}
	// The breaker stops trying b after a few failures instead of on every request.
	if tries := metricValue(t, a, "shardcache_peer_requests_total", `peer="b"`, `result="error"`); tries > 10 {
		t.Fatalf("a tried the stopped owner %v times; the breaker should skip it", tries)
	}
}

func TestSessionOverTLS(t *testing.T) {
	// httptest's certificate (for 127.0.0.1) serves as the control plane's.
	certSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer certSrv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(certSrv.Certificate())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeControl{wake: make(chan struct{}), addr: l.Addr().String(), acks: make(chan *pb.PolicyAck, 16),
		srv: grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: certSrv.TLS.Certificates})))}
	pb.RegisterNodeServiceServer(f.srv, f)
	go f.srv.Serve(l)
	defer f.srv.Stop()

	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	n := startNode(t, "a", f.addr, origin.URL, func(c *Config) { c.ControlPlaneTLS = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12} })
	f.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	if f.hellos.Load() != 1 {
		t.Fatalf("%d hellos over TLS, want 1", f.hellos.Load())
	}
}

func TestHandoffAfterAMemberJoins(t *testing.T) {
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff %v", handoff), func(t *testing.T) {
			o := &testOrigin{}
			origin := httptest.NewServer(o)
			defer origin.Close()
			opts := []func(*Config){noHotKeys}
			if !handoff {
				opts = append(opts, noHandoff)
			}
			fc, a, b := startPairOn(t, origin.URL, opts...)
			const keys = 300
			for i := range keys {
				do(t, "GET", fmt.Sprintf("http://%s/h/%d", a.ClientAddr(), i))
			}
			c := startNode(t, "c", fc.addr, origin.URL, opts...)
			e2 := epochOf(2, a, b, c)
			fc.publish(e2)
			for _, n := range []*Node{a, b, c} {
				waitEpoch(t, n, 2)
			}
			moved := 0
			r2 := mustRing(t, e2)
			for i := range keys {
				if r2.Owner(fmt.Sprintf("http127.0.0.1/h/%d", i)).ID == "c" {
					moved++
				}
				do(t, "GET", fmt.Sprintf("http://%s/h/%d", b.ClientAddr(), i))
			}
			again := 0
			for i := range keys {
				again += int(o.count(fmt.Sprintf("/h/%d", i))) - 1
			}
			t.Logf("handoff %v: %d of %d keys moved to c; %d origin requests for them", handoff, moved, keys, again)
			if moved < keys/6 {
				t.Fatalf("only %d keys moved", moved)
			}
			if handoff && again != 0 || !handoff && again != moved {
				t.Errorf("%d origin requests after the change, want %d", again, map[bool]int{true: 0, false: moved}[handoff])
			}
			if hits := metricValue(t, c, "shardcache_handoff_requests_total", `result="hit"`); handoff && int(hits) != moved {
				t.Errorf("c counted %v handoff hits, want %d", hits, moved)
			}
			// A key nobody stored: the previous owner is asked for a copy
			// only, so the origin still sees one request.
			path := pathOwnedBy(t, e2, "/new/", "c")
			do(t, "GET", "http://"+c.ClientAddr().String()+path)
			if n := o.count(path); n != 1 {
				t.Errorf("a new key reached the origin %d times, want once", n)
			}
		})
	}
}

func TestDrainEndpointLeavesTheRingAndKeepsServing(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	_, b, _ := startPair(t, origin.URL, func(c *Config) { c.AdminToken = "s3cret-token" })
	if resp, _ := do(t, "GET", "http://"+b.OpsAddr().String()+"/drain", "Authorization", "Bearer s3cret-token"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /drain: %d, want 405: what changes the node is a POST", resp.StatusCode)
	}
	resp, body := do(t, "POST", "http://"+b.OpsAddr().String()+"/drain", "Authorization", "Bearer s3cret-token")
	if resp.StatusCode != 200 || !strings.Contains(body, "safe to stop") {
		t.Fatalf("/drain: %d %q", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", "http://"+b.OpsAddr().String()+"/readyz"); resp.StatusCode != 503 || !strings.Contains(body, "draining") {
		t.Errorf("/readyz of a drained node: %d %q", resp.StatusCode, body)
	}
	// The session ends as the drain's leave is noticed by its goroutine.
	waitFor(t, "the drained node's session to end", func() bool { return !b.session.Connected() })
	if resp, _ := do(t, "GET", "http://"+b.ClientAddr().String()+"/x"); resp.StatusCode != 200 {
		t.Errorf("a drained node stopped serving: %d", resp.StatusCode)
	}
}

func TestJoiningNodePreCopiesHotKeys(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	hotAt := func(c *Config) { c.HotThreshold = 100 } // requests a minute at a node: one request reads as 13
	fc, a, b := startPairOn(t, origin.URL, hotAt)
	c := startNode(t, "c", fc.addr, origin.URL, hotAt)
	waitEpoch(t, c, 1)
	e2 := epochOf(2, a, b, c)
	r2 := mustRing(t, e2)
	var hot, cold []string
	for i := 0; len(hot) < 5 || len(cold) < 5; i++ {
		p := fmt.Sprintf("/p/%d", i)
		if r2.Owner("http127.0.0.1"+p).ID != "c" {
			continue
		}
		if len(hot) < 5 {
			hot = append(hot, p)
		} else {
			cold = append(cold, p)
		}
	}
	for _, p := range cold {
		do(t, "GET", "http://"+a.ClientAddr().String()+p)
	}
	for _, p := range hot {
		for range 10 {
			do(t, "GET", "http://"+a.ClientAddr().String()+p)
		}
	}
	fc.publish(e2)
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range hot {
		for {
			if _, ok := c.store.Peek("http127.0.0.1" + p); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("c never pre-copied the hot key %s", p)
			}
			time.Sleep(10 * time.Millisecond) // polling c's store
		}
	}
	for _, p := range cold {
		if _, ok := c.store.Peek("http127.0.0.1" + p); ok {
			t.Errorf("c pre-copied %s, which was never hot", p)
		}
	}
	for _, p := range append(hot, cold...) {
		if n := o.count(p); n != 1 {
			t.Errorf("%s reached the origin %d times, want once (the warm-up)", p, n)
		}
	}
	// Served by c from what it pre-copied.
	for _, p := range hot {
		if resp, _ := do(t, "GET", "http://"+c.ClientAddr().String()+p); resp.Header.Get("X-Cache") != "HIT" || resp.Header.Get("X-Cache-Node") != "c" {
			t.Errorf("%s via c after the change: %s from %s", p, resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"))
		}
	}
}

func TestPeerWithANewerEpochMakesANodeFetchIt(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	fc, a, b := startPairOn(t, origin.URL, noHotKeys)
	fc.held.Store("b", true) // b's replica lags: no push of epoch 2
	e2 := epochOf(2, a, b)
	fc.publish(e2)
	waitEpoch(t, a, 2)
	if b.Epoch() != 1 {
		t.Fatalf("b serves epoch %d before any peer named a newer one", b.Epoch())
	}
	// a relays a request for b's key, naming epoch 2: b serves it, never
	// relays it back, and asks for the epoch.
	path := pathOwnedBy(t, e2, "/e/", "b")
	if resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+path); resp.Header.Get("X-Cache-Node") != "b" {
		t.Fatalf("served by %q, want b", resp.Header.Get("X-Cache-Node"))
	}
	waitEpoch(t, b, 2)
	if n := o.count(path); n != 1 {
		t.Errorf("origin saw %d requests, want 1", n)
	}
}

// A hot key's relayed requests are shared by its owners: a non-owner that
// keeps no copy (the answer varies) relays to both, and the origin still
// sees one request, the second owner filling from the first.
func TestHotKeyRelaysReachBothOwners(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{header: http.Header{"Vary": {"X-Test"}}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	nodes, e := startHotTrio(t, fc, origin.URL, 1)
	path := "/hot/shared"
	owners := ownersOf(t, e, "http127.0.0.1"+path, 3)
	other := nodes[owners[2]]
	servedBy := map[string]int{}
	for range 40 {
		resp, body := do(t, "GET", "http://"+other.ClientAddr().String()+path)
		if resp.StatusCode != 200 || body != "body of "+path {
			t.Fatalf("via %s: %d %q", other.ID(), resp.StatusCode, body)
		}
		servedBy[resp.Header.Get("X-Cache-Node")]++
	}
	if servedBy[owners[0]] == 0 || servedBy[owners[1]] == 0 {
		t.Fatalf("40 requests for a hot key via non-owner %s were served by %v; want both owners %s and %s", other.ID(), servedBy, owners[0], owners[1])
	}
	if n := o.count(path); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1", n)
	}
}

// startHotTrio starts nodes a, b and c in one epoch under a policy whose
// keys turn hot above threshold requests a minute.
func startHotTrio(t *testing.T, fc *fakeControl, origin string, threshold uint32) (map[string]*Node, *pb.RingEpoch) {
	t.Helper()
	nodes := map[string]*Node{}
	var all []*Node
	for _, id := range []string{"a", "b", "c"} {
		n := startNode(t, id, fc.addr, origin)
		nodes[id] = n
		all = append(all, n)
	}
	e := epochOf(1, all...)
	fc.publish(e)
	set := &pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{{Name: "all", PathPrefix: "/", HotThreshold: threshold}}}
	for _, n := range all {
		waitEpoch(t, n, 1)
		if err := n.ApplyPolicies(set); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, e
}

// unmarkedPeerRequest sends a's peer listener an h2c request without the
// hop marker, and wants it refused with 400.
func unmarkedPeerRequest(t *testing.T, a *Node) {
	t.Helper()
	h2c := &http.Client{Transport: &http.Transport{Protocols: relay.Protocols(false)}}
	resp, err := h2c.Get("http://" + a.PeerAddr().String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unmarked request on the peer listener: %d, want 400", resp.StatusCode)
	}
}
