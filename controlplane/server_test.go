package controlplane

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"

	"github.com/shardcache/shardcache/sdk/loopback"
)

const testToken = "test-token"

// freeURL returns a free loopback URL for an etcd to be started.
func freeURL(t *testing.T) string { return "http://" + freeAddr(t) }

// freeAddr returns a free loopback address from loopback's range, for a
// replica's listener. Not a port of the kernel's choosing: a node of
// another package's tests, running at the same time, may still be dialling
// the port its own fake control plane had from the kernel, and would
// register with a replica that got it next.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, ok := loopback.Addr()
	if !ok {
		t.Fatal("no free port in 20000-31999")
	}
	return addr
}

// startServer runs a replica until the test ends. With no endpoints it
// starts its own embedded etcd.
func startServer(t *testing.T, endpoints []string, opts ...func(*Config)) (*Server, Config, func()) {
	t.Helper()
	cfg := Config{
		ListenAddr:       freeAddr(t),
		EtcdEndpoints:    endpoints,
		EmbeddedEtcd:     EmbeddedEtcdConfig{Dir: t.TempDir(), ClientURL: freeURL(t), PeerURL: freeURL(t)},
		AdminToken:       testToken,
		LeaseTTL:         2 * time.Second,
		EpochBatchWindow: 300 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
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
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run ended before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("control plane not ready")
	}
	return s, cfg, stop
}

// testEtcd starts an embedded etcd of its own, for tests of several replicas.
func testEtcd(t *testing.T) string {
	t.Helper()
	cfg := EmbeddedEtcdConfig{Dir: t.TempDir(), ClientURL: freeURL(t), PeerURL: freeURL(t)}
	e, err := startEmbeddedEtcd(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return cfg.ClientURL
}

func dial(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func adminCtx(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// nodeSession is a test node's open session.
type nodeSession struct {
	stream pb.NodeService_SessionClient
	cancel context.CancelFunc
	// snapshot is the epoch the session started with, which may already be
	// the one a test waits for.
	snapshot *pb.RingEpoch
	// missedBatches is how many MissedPurges messages came ahead of the
	// snapshot.
	missedBatches int
}

func openSession(t *testing.T, conn *grpc.ClientConn, id string) *nodeSession {
	t.Helper()
	n, _ := openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: id, PeerAddress: "127.0.0.1:9999", PublicUrl: "http://" + id}})
	return n
}

// sayHello opens a session stream on ctx and sends hello on it.
func sayHello(t *testing.T, ctx context.Context, conn *grpc.ClientConn, hello *pb.Hello) pb.NodeService_SessionClient {
	t.Helper()
	stream, err := pb.NewNodeServiceClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	return stream
}

// openSessionWith says hello and returns the session and its snapshot.
func openSessionWith(t *testing.T, conn *grpc.ClientConn, hello *pb.Hello) (*nodeSession, *pb.Snapshot) {
	t.Helper()
	id := hello.GetMember().GetId()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream := sayHello(t, ctx, conn, hello)
	// Missed purges that do not fit in the snapshot come ahead of it: the
	// snapshot returned carries them all, in order.
	var missed []*pb.Purge
	batches := 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: no snapshot: %v", id, err)
		}
		if m := resp.GetMissedPurges(); m != nil {
			missed = append(missed, m.GetPurges()...)
			batches++
			continue
		}
		snap := resp.GetSnapshot()
		if snap == nil {
			t.Fatalf("%s: message %T before the snapshot, want a snapshot or missed purges", id, resp.GetMsg())
		}
		if got := snap.GetMember().GetState(); got != pb.MemberState_MEMBER_STATE_ACTIVE {
			t.Fatalf("%s registered as %s", id, got)
		}
		snap.Purges = append(missed, snap.GetPurges()...)
		return &nodeSession{stream: stream, cancel: cancel, snapshot: snap.GetEpoch(), missedBatches: batches}, snap
	}
}

// waitEpoch reads pushes until an epoch with exactly the given members;
// after 30 s without it the test fails instead of hanging.
func (n *nodeSession) waitEpoch(t *testing.T, ids ...string) *pb.RingEpoch {
	t.Helper()
	want := strings.Join(ids, ",")
	matches := func(e *pb.RingEpoch) bool {
		var got []string
		for _, m := range e.GetMembers() {
			got = append(got, m.GetId())
		}
		return e != nil && strings.Join(got, ",") == want
	}
	if e := n.snapshot; matches(e) {
		n.snapshot = nil
		return e
	}
	n.snapshot = nil
	resp, err := n.recvUntil(func(r *pb.SessionResponse) bool { return matches(r.GetEpoch()) })
	if err != nil {
		t.Fatalf("waiting for epoch [%s]: %v", want, err)
	}
	return resp.GetEpoch()
}

func TestSessionsBecomeEpochs(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)

	// Three nodes within one batch window make one epoch.
	a := openSession(t, conn, "node-a")
	b := openSession(t, conn, "node-b")
	c := openSession(t, conn, "node-c")
	e1 := a.waitEpoch(t, "node-a", "node-b", "node-c")
	if e1.GetEpoch() != 1 {
		t.Fatalf("three joins in one window made epoch %d, want 1", e1.GetEpoch())
	}
	b.waitEpoch(t, "node-a", "node-b", "node-c")

	// A clean goodbye leaves at once: a new epoch without node-c.
	if err := c.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	e2 := a.waitEpoch(t, "node-a", "node-b")
	if e2.GetEpoch() != 2 || e2.GetPreviousEpoch() != 1 || e2.GetReason() != "-node-c" {
		t.Fatalf("after goodbye: epoch %d (previous %d, reason %q), want 2 after 1 for -node-c", e2.GetEpoch(), e2.GetPreviousEpoch(), e2.GetReason())
	}

	// A broken session leaves when its lease expires.
	b.cancel()
	e3 := a.waitEpoch(t, "node-a")
	if e3.GetEpoch() != 3 {
		t.Fatalf("after broken session: epoch %d, want 3", e3.GetEpoch())
	}

	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	cur, err := admin.GetRing(ctx, &pb.GetRingRequest{})
	if err != nil || cur.GetEpoch().GetEpoch() != 3 {
		t.Fatalf("GetRing = %v, %v; want epoch 3", cur, err)
	}
	old, err := admin.GetRing(ctx, &pb.GetRingRequest{Epoch: 1})
	if err != nil || len(old.GetEpoch().GetMembers()) != 3 {
		t.Fatalf("GetRing(1) = %v, %v; want the 3-member epoch", old, err)
	}
	if _, err := admin.GetRing(ctx, &pb.GetRingRequest{Epoch: 99}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetRing(99) error %v, want NotFound", err)
	}
	nodes, err := admin.ListNodes(ctx, &pb.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.GetNodes()) != 1 || nodes.GetNodes()[0].GetMember().GetId() != "node-a" || !nodes.GetNodes()[0].GetInRing() {
		t.Fatalf("ListNodes = %v, want node-a in the ring", nodes.GetNodes())
	}
}

func TestLoadReportsReachListNodes(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	a := openSession(t, conn, "node-a")
	a.waitEpoch(t, "node-a")
	load := &pb.LoadReport{Epoch: 1, RequestsTotal: 42, MemoryObjects: 7}
	if err := a.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Load{Load: load}}); err != nil {
		t.Fatal(err)
	}
	admin := pb.NewAdminServiceClient(conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := admin.ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if n := resp.GetNodes(); len(n) == 1 && n[0].GetLoad().GetRequestsTotal() == 42 {
			if n[0].GetServingEpoch() != 1 || n[0].GetLastReportAt() == nil {
				t.Fatalf("node status %v lacks the serving epoch or report time", n[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load report never reached ListNodes: %v", resp.GetNodes())
		}
		time.Sleep(20 * time.Millisecond) // polling etcd for the asynchronous write
	}
}

func TestAdminNeedsToken(t *testing.T) {
	s, _, _ := startServer(t, nil)
	admin := pb.NewAdminServiceClient(dial(t, s))
	for name, ctx := range map[string]context.Context{
		"no token":    context.Background(),
		"wrong token": adminCtx(context.Background(), "nope"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := admin.ListNodes(ctx, &pb.ListNodesRequest{})
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("error %v, want Unauthenticated", err)
			}
		})
	}
	if _, err := admin.GetRing(adminCtx(context.Background(), testToken), &pb.GetRingRequest{}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetRing before any node: %v, want NotFound", err)
	}
}

func TestBadHelloIsRefused(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	tests := []struct {
		name string
		msg  *pb.SessionRequest
	}{
		{"load before hello", &pb.SessionRequest{Msg: &pb.SessionRequest_Load{Load: &pb.LoadReport{}}}},
		{"no member", &pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: &pb.Hello{}}}},
		{"bad id", &pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: &pb.Hello{Member: &pb.Member{Id: "../etc", PeerAddress: "127.0.0.1:1"}}}}},
		{"bad peer address", &pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "nowhere"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := pb.NewNodeServiceClient(conn).Session(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(tt.msg); err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error %v, want InvalidArgument", err)
			}
		})
	}
}

func TestOneLeaderAmongReplicasAndFailover(t *testing.T) {
	etcd := []string{testEtcd(t)}
	r1, _, stop1 := startServer(t, etcd)
	r2, _, stop2 := startServer(t, etcd)
	leaders := func() []*Server {
		var out []*Server
		for _, r := range []*Server{r1, r2} {
			if r.IsLeader() {
				out = append(out, r)
			}
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(leaders()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no replica became leader")
		}
		time.Sleep(20 * time.Millisecond) // polling the election outcome
	}
	if n := len(leaders()); n != 1 {
		t.Fatalf("%d leaders, want 1", n)
	}
	follower, stopLeader := r2, stop1
	if r2.IsLeader() {
		follower, stopLeader = r1, stop2
	}

	// A node on the follower gets the epochs the leader writes.
	conn := dial(t, follower)
	a := openSession(t, conn, "node-a")
	a.waitEpoch(t, "node-a")

	// Once the leader is gone, the follower takes over and writes the next epoch.
	stopLeader()
	b := openSession(t, conn, "node-b")
	e := b.waitEpoch(t, "node-a", "node-b")
	if e.GetEpoch() != 2 {
		t.Fatalf("epoch after failover is %d, want 2", e.GetEpoch())
	}
	if !follower.IsLeader() {
		t.Fatal("the surviving replica is not the leader")
	}
	// Every epoch record was created once and never overwritten: no epoch
	// number was written twice, by either leader.
	resp, err := follower.etcd.Get(context.Background(), follower.state.prefix+"epochs/0", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, kv := range resp.Kvs {
		if kv.Version != 1 {
			t.Errorf("%s was written %d times", kv.Key, kv.Version)
		}
		if kv.CreateRevision <= last {
			t.Errorf("%s was created out of order", kv.Key)
		}
		last = kv.CreateRevision
	}
	if len(resp.Kvs) != 2 {
		t.Fatalf("%d epochs recorded, want 2", len(resp.Kvs))
	}
}

func TestValidate(t *testing.T) {
	base := func() Config {
		c := Config{EmbeddedEtcd: EmbeddedEtcdConfig{Dir: "/tmp/x"}, AdminToken: "t"}
		c.setDefaults()
		return c
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"listen without port", func(c *Config) { c.ListenAddr = "localhost" }, "listen address"},
		{"bad etcd endpoint", func(c *Config) { c.EtcdEndpoints = []string{"etcd:2379"} }, "etcd endpoint"},
		{"embedded without dir", func(c *Config) { c.EmbeddedEtcd.Dir = "" }, "data directory"},
		{"embedded etcd off loopback", func(c *Config) { c.EmbeddedEtcd.ClientURL = "http://0.0.0.0:2379" }, "embedded etcd client URL \"http://0.0.0.0:2379\" is not on a loopback address"},
		{"embedded etcd peers off loopback", func(c *Config) { c.EmbeddedEtcd.PeerURL = "http://10.0.0.5:2380" }, "embedded etcd peer URL"},
		{"embedded etcd on localhost", func(c *Config) { c.EmbeddedEtcd.ClientURL = "http://localhost:2379" }, ""},
		{"short lease", func(c *Config) { c.LeaseTTL = time.Second }, "lease TTL"},
		{"no token", func(c *Config) { c.AdminToken = "" }, "admin token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error about %s", err, tt.want)
			}
		})
	}
}

func TestUnreachableEtcdFailsRun(t *testing.T) {
	s, err := New(Config{
		ListenAddr: "127.0.0.1:0", EtcdEndpoints: []string{freeURL(t)}, AdminToken: "t",
		EtcdDialTimeout: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Run = %v, want an etcd unreachable error", err)
	}
}
