package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestPolicyViolations(t *testing.T) {
	ok := func() *pb.CachePolicy {
		return &pb.CachePolicy{Name: "images", Hosts: []string{"img.example.com"}, PathPrefix: "/img/",
			OriginUrls: []string{"http://origin:8080"}, KeyTemplate: "$scheme$host$uri", Mode: pb.CacheMode_CACHE_MODE_SHARDED}
	}
	tests := []struct {
		name   string
		mutate func(*pb.CachePolicy)
		fields []string // every field that must be named
	}{
		{"valid", func(*pb.CachePolicy) {}, nil},
		{"bad name", func(p *pb.CachePolicy) { p.Name = "Images!" }, []string{"name"}},
		{"host with port", func(p *pb.CachePolicy) { p.Hosts = []string{"img.example.com:80"} }, []string{"hosts[0]"}},
		{"relative prefix", func(p *pb.CachePolicy) { p.PathPrefix = "img" }, []string{"path_prefix"}},
		{"origin without scheme", func(p *pb.CachePolicy) { p.OriginUrls = []string{"origin:8080"} }, []string{"origin_urls[0]"}},
		{"unknown template variable", func(p *pb.CachePolicy) { p.KeyTemplate = "$host$path" }, []string{"key_template"}},
		{"unknown mode", func(p *pb.CachePolicy) { p.Mode = 42 }, []string{"mode"}},
		{"bad status range", func(p *pb.CachePolicy) { p.ExcludedStatuses = []*pb.StatusRange{{From: 399, To: 300}} }, []string{"excluded_statuses[0]"}},
		{"negative TTL", func(p *pb.CachePolicy) { p.DefaultTtl = durationpb.New(-time.Second) }, []string{"default_ttl"}},
		{"heuristic 599", func(p *pb.CachePolicy) { p.HeuristicStatuses = []uint32{599} }, nil},
		{"heuristic 1xx", func(p *pb.CachePolicy) { p.HeuristicStatuses = []uint32{599, 103} }, []string{"heuristic_statuses[1]"}},
		{"tiny slices", func(p *pb.CachePolicy) { p.SliceSize = 1000 }, []string{"slice_size"}},
		{"8 MiB slices", func(p *pb.CachePolicy) { p.SliceSize = 8 << 20 }, nil},
		{"huge slices", func(p *pb.CachePolicy) { p.SliceSize = 2 << 30 }, []string{"slice_size"}},
		{"slices larger than any stored object", func(p *pb.CachePolicy) { p.SliceSize, p.MaxObjectSize = 8<<20, 1<<20 }, []string{"slice_size"}},
		{"authorize every request", func(p *pb.CachePolicy) { p.AuthorizeEveryRequest = true }, nil},
		{"authorize every request, uncached", func(p *pb.CachePolicy) { p.AuthorizeEveryRequest, p.CacheAuthorized = true, proto.Bool(false) }, []string{"authorize_every_request"}},
		{"authorize every request, sliced", func(p *pb.CachePolicy) { p.AuthorizeEveryRequest, p.SliceSize = true, 1<<20 }, []string{"authorize_every_request"}},
		{"stale if disconnected off", func(p *pb.CachePolicy) { p.StaleIfDisconnected = proto.Bool(false) }, nil},
		{"authorize every request, stale if disconnected off", func(p *pb.CachePolicy) { p.AuthorizeEveryRequest, p.StaleIfDisconnected = true, proto.Bool(false) }, nil},
		{"authorize every request, stale if disconnected", func(p *pb.CachePolicy) { p.AuthorizeEveryRequest, p.StaleIfDisconnected = true, proto.Bool(true) }, []string{"stale_if_disconnected"}},
		{"origin_host client", func(p *pb.CachePolicy) { p.OriginHost = "client" }, nil},
		{"origin_host unknown", func(p *pb.CachePolicy) { p.OriginHost = "proxy" }, []string{"origin_host"}},
		{"vary_by a field", func(p *pb.CachePolicy) { p.VaryBy = []string{"Accept", "X-Tenant"} }, nil},
		{"vary_by a bad name", func(p *pb.CachePolicy) { p.VaryBy = []string{"Accept Language"} }, []string{"vary_by[0]"}},
		{"vary_by too many", func(p *pb.CachePolicy) { p.VaryBy = strings.Split("a,b,c,d,e,f,g,h,i", ",") }, []string{"vary_by"}},
		{"partial content with slices", func(p *pb.CachePolicy) { p.SliceSize, p.PartialContent = 1<<20, true }, []string{"partial_content"}},
		{"empty bypass rule", func(p *pb.CachePolicy) { p.Bypass = []*pb.BypassRule{{}} }, []string{"bypass[0]"}},
		{"bad path pattern", func(p *pb.CachePolicy) { p.Bypass = []*pb.BypassRule{{PathPatterns: []string{"/api/["}}} }, []string{"bypass[0].path_patterns"}},
		{"relay shorter than collapse wait", func(p *pb.CachePolicy) {
			p.CollapseTimeout, p.RelayTimeout = durationpb.New(30*time.Second), durationpb.New(10*time.Second)
		}, []string{"relay_timeout"}},
		{"several at once", func(p *pb.CachePolicy) { p.Name, p.PathPrefix = "", "x" }, []string{"name", "path_prefix"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok()
			tt.mutate(p)
			var got []string
			for _, v := range policyViolations(p) {
				got = append(got, v.GetField())
			}
			if len(tt.fields) == 0 && len(got) > 0 {
				t.Fatalf("valid policy refused: %v", policyViolations(p))
			}
			for _, f := range tt.fields {
				if !slices.Contains(got, f) {
					t.Fatalf("violations %v do not name %s", got, f)
				}
			}
		})
	}
}

// recvPolicies reads pushes until a policy set arrives.
func (n *nodeSession) recvPolicies(t *testing.T) *pb.PolicySet {
	t.Helper()
	resp, err := n.recvUntil(func(r *pb.SessionResponse) bool { return r.GetPolicies() != nil })
	if err != nil {
		t.Fatalf("waiting for policies: %v", err)
	}
	return resp.GetPolicies()
}

// recvUntil reads pushes until one that want accepts; after 30 s without
// it the session is cancelled and the error returned, instead of hanging.
func (n *nodeSession) recvUntil(want func(*pb.SessionResponse) bool) (*pb.SessionResponse, error) {
	timer := time.AfterFunc(30*time.Second, n.cancel) // ends Recv with an error
	defer timer.Stop()
	for {
		resp, err := n.stream.Recv()
		if err != nil {
			return nil, err
		}
		if want(resp) {
			return resp, nil
		}
	}
}

func TestPolicyCRUDPushAndStatus(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	node := openSession(t, conn, "node-a")

	put, err := admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: &pb.CachePolicy{Name: "images", PathPrefix: "/img/"}})
	if err != nil {
		t.Fatal(err)
	}
	ps := node.recvPolicies(t)
	if ps.GetIncremental() || len(ps.GetPolicies()) != 1 || ps.GetRevision() != put.GetPolicy().GetRevision() {
		t.Fatalf("first push %v, want the whole set at revision %d", ps, put.GetPolicy().GetRevision())
	}
	ack := &pb.PolicyAck{AppliedRevision: ps.GetRevision()}
	if err := node.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PolicyAck{PolicyAck: ack}}); err != nil {
		t.Fatal(err)
	}

	// An invalid policy is refused field by field and changes nothing.
	_, err = admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: &pb.CachePolicy{Name: "bad", PathPrefix: "nope", Hosts: []string{"A B"}}})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("invalid policy: %v, want InvalidArgument", err)
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	if !slices.Contains(fields, "path_prefix") || !slices.Contains(fields, "hosts[0]") {
		t.Fatalf("field violations %v, want path_prefix and hosts[0]", fields)
	}
	// Another policy claiming the same match is refused.
	if _, err := admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: &pb.CachePolicy{Name: "images2", PathPrefix: "/img/"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("overlapping policy: %v, want InvalidArgument", err)
	}
	list, err := admin.ListPolicies(ctx, &pb.ListPoliciesRequest{})
	if err != nil || len(list.GetPolicies()) != 1 || list.GetRevision() != ps.GetRevision() {
		t.Fatalf("after refusals: %v, %v; want one policy at revision %d", list, err, ps.GetRevision())
	}

	// The node's acknowledgement shows in PolicyStatus.
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := admin.PolicyStatus(ctx, &pb.PolicyStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(stat.GetNodes()) == 1 && stat.GetNodes()[0].GetAppliedRevision() == stat.GetRevision() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy status never showed the ack: %v", stat)
		}
		time.Sleep(20 * time.Millisecond) // polling the asynchronous status write
	}

	del, err := admin.DeletePolicy(ctx, &pb.DeletePolicyRequest{Name: "images"})
	if err != nil {
		t.Fatal(err)
	}
	ps = node.recvPolicies(t)
	if !ps.GetIncremental() || !slices.Equal(ps.GetDeleted(), []string{"images"}) || ps.GetRevision() != del.GetRevision() {
		t.Fatalf("push after delete %v, want images deleted at %d", ps, del.GetRevision())
	}
	if _, err := admin.GetPolicy(ctx, &pb.GetPolicyRequest{Name: "images"}); status.Code(err) != codes.NotFound {
		t.Fatalf("deleted policy: %v, want NotFound", err)
	}
	if _, err := admin.DeletePolicy(ctx, &pb.DeletePolicyRequest{Name: "images"}); status.Code(err) != codes.NotFound {
		t.Fatalf("deleting twice: %v, want NotFound", err)
	}
}

func TestReconnectAfterManyChangesGetsOnlyThem(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	put := func(name string, ttl time.Duration) {
		t.Helper()
		p := &pb.CachePolicy{Name: name, PathPrefix: "/" + name + "/", DefaultTtl: durationpb.New(ttl)}
		if _, err := admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: p}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		put(fmt.Sprintf("p%02d", i), time.Minute)
	}
	caughtUp(t, s)
	hello := &pb.Hello{Member: &pb.Member{Id: "node-a", PeerAddress: "127.0.0.1:1"}}
	first, snap := openSessionWith(t, conn, hello)
	if snap.GetPolicies().GetIncremental() || len(snap.GetPolicies().GetPolicies()) != 50 {
		t.Fatalf("a new node got %d policies (incremental %v), want the whole set of 50", len(snap.GetPolicies().GetPolicies()), snap.GetPolicies().GetIncremental())
	}
	applied := snap.GetPolicies().GetRevision()
	first.cancel()

	// 100 changes while the node is away: ten policies changed ten times
	// each; then two deleted.
	for round := range 10 {
		for i := range 10 {
			put(fmt.Sprintf("p%02d", i), time.Duration(round+2)*time.Minute)
		}
	}
	for _, name := range []string{"p48", "p49"} {
		if _, err := admin.DeletePolicy(ctx, &pb.DeletePolicyRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	list := caughtUp(t, s)

	hello.PolicyRevision = applied
	_, snap = openSessionWith(t, conn, hello)
	ps := snap.GetPolicies()
	if !ps.GetIncremental() || ps.GetSinceRevision() != applied || ps.GetRevision() != list.GetRevision() {
		t.Fatalf("reconnect got incremental=%v since %d at %d; want the changes since %d up to %d",
			ps.GetIncremental(), ps.GetSinceRevision(), ps.GetRevision(), applied, list.GetRevision())
	}
	var names []string
	for _, p := range ps.GetPolicies() {
		names = append(names, p.GetName())
		if p.GetDefaultTtl().AsDuration() != 11*time.Minute {
			t.Errorf("%s carries TTL %s, want its last value 11m", p.GetName(), p.GetDefaultTtl().AsDuration())
		}
	}
	want := []string{"p00", "p01", "p02", "p03", "p04", "p05", "p06", "p07", "p08", "p09"}
	if !slices.Equal(names, want) || !slices.Equal(ps.GetDeleted(), []string{"p48", "p49"}) {
		t.Fatalf("changes: %v deleted %v; want %v and [p48 p49]", names, ps.GetDeleted(), want)
	}

	// A node already at the current revision gets no policies at all.
	hello.Member.Id, hello.PolicyRevision = "node-b", list.GetRevision()
	if _, snap := openSessionWith(t, conn, hello); snap.GetPolicies() != nil {
		t.Fatalf("an up-to-date node got %d policies", len(snap.GetPolicies().GetPolicies()))
	}
}

// caughtUp waits until the replica's watch has every policy change stored
// in etcd, and returns the stored set.
func caughtUp(t *testing.T, s *Server) *pb.ListPoliciesResponse {
	t.Helper()
	ps, rev, _, err := s.state.policies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	list := &pb.ListPoliciesResponse{Policies: ps, Revision: rev}
	deadline := time.Now().Add(10 * time.Second)
	for s.policies.revision() != list.GetRevision() {
		if time.Now().After(deadline) {
			t.Fatal("the replica's view never caught up")
		}
		time.Sleep(10 * time.Millisecond) // polling the watch's progress
	}
	return list
}

func TestTwentyJoinsMakeOneEpoch(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.EpochBatchWindow = 2 * time.Second })
	conn := dial(t, s)
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("node-%02d", i))
	}
	sessions := make([]*nodeSession, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessions[i] = openSession(t, conn, id)
		}()
	}
	wg.Wait()
	e := sessions[0].waitEpoch(t, ids...)
	if e.GetEpoch() != 1 {
		t.Fatalf("20 joins within the window made epoch %d, want 1", e.GetEpoch())
	}
}

func TestDrainAndUndrain(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	a := openSession(t, conn, "node-a")
	c := openSession(t, conn, "node-c")
	a.waitEpoch(t, "node-a", "node-c")

	if _, err := admin.DrainNode(ctx, &pb.DrainNodeRequest{NodeId: "node-c"}); err != nil {
		t.Fatal(err)
	}
	e := a.waitEpoch(t, "node-a")
	if !strings.Contains(e.GetReason(), "-node-c") {
		t.Fatalf("drain epoch reason %q", e.GetReason())
	}
	// The drained node keeps its session and learns the epoch it left.
	c.waitEpoch(t, "node-a")
	nodes, err := admin.ListNodes(ctx, &pb.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.GetNodes() {
		if n.GetMember().GetId() == "node-c" && (n.GetInRing() || n.GetMember().GetState() != pb.MemberState_MEMBER_STATE_DRAINING) {
			t.Fatalf("node-c after drain: in ring %v, state %s", n.GetInRing(), n.GetMember().GetState())
		}
	}
	if _, err := admin.UndrainNode(ctx, &pb.UndrainNodeRequest{NodeId: "node-c"}); err != nil {
		t.Fatal(err)
	}
	a.waitEpoch(t, "node-a", "node-c")
	if _, err := admin.DrainNode(ctx, &pb.DrainNodeRequest{NodeId: "nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("draining an unknown node: %v, want NotFound", err)
	}
}

func TestJoinToken(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.JoinToken = "secret" })
	conn := dial(t, s)
	for name, token := range map[string]string{"missing": "", "wrong": "guess"} {
		t.Run(name, func(t *testing.T) {
			stream, err := pb.NewNodeServiceClient(conn).Session(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			hello := &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:1"}, JoinToken: token}
			if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: hello}}); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("join with %s token: %v, want Unauthenticated", name, err)
			}
		})
	}
	openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:1"}, JoinToken: "secret"})
}

func TestRampWeights(t *testing.T) {
	const rampup = 4 * time.Second
	t0 := time.Unix(1000, 0)
	members := func() []*pb.Member {
		return []*pb.Member{{Id: "a"}, {Id: "b", Weight: 2}, {Id: "c"}}
	}
	weights := func(ms []*pb.Member) []uint32 {
		var out []uint32
		for _, m := range ms {
			out = append(out, m.GetWeight())
		}
		return out
	}
	cur := &pb.RingEpoch{Epoch: 1, Members: []*pb.Member{{Id: "a"}, {Id: "b", Weight: 2}}}
	ramps := map[string]time.Time{}
	for _, tt := range []struct {
		at   time.Duration
		want []uint32
		wake time.Duration
	}{
		{0, []uint32{4, 8, 1}, time.Second},                                  // c joins: a quarter of its weight
		{1500 * time.Millisecond, []uint32{4, 8, 2}, 500 * time.Millisecond}, // half
		{2 * time.Second, []uint32{4, 8, 3}, time.Second},                    // three quarters
		{3 * time.Second, []uint32{0, 2, 0}, 0},                              // done: weights as registered
	} {
		want := members()
		wake := rampWeights(want, cur, ramps, rampup, t0.Add(tt.at))
		if got := weights(want); !slices.Equal(got, tt.want) || wake != tt.wake {
			t.Errorf("at %s: weights %v, wake in %s; want %v, %s", tt.at, got, wake, tt.want, tt.wake)
		}
		cur = &pb.RingEpoch{Members: want}
	}
	// A new cluster's first members, and any member without a rampup, start at full weight.
	if wake := rampWeights(members(), nil, map[string]time.Time{}, rampup, t0); wake != 0 {
		t.Errorf("first epoch ramps (wake %s)", wake)
	}
	if wake := rampWeights(members(), &pb.RingEpoch{Members: []*pb.Member{{Id: "a"}}}, map[string]time.Time{}, 0, t0); wake != 0 {
		t.Errorf("rampup 0 ramps (wake %s)", wake)
	}
}

func TestJoiningMemberRampsUpOverEpochs(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.Rampup = 800 * time.Millisecond; c.EpochBatchWindow = 50 * time.Millisecond })
	conn := dial(t, s)
	a := openSession(t, conn, "node-a")
	openSession(t, conn, "node-b")
	// node-b ramps up too, as it joined a running ring: node-c joins once
	// it is at full weight, so that only node-c's ramp is measured.
	for e := a.waitEpoch(t, "node-a", "node-b"); e.GetMembers()[1].GetWeight() != 0; {
		e = a.waitEpoch(t, "node-a", "node-b")
	}
	openSession(t, conn, "node-c")
	var got []string
	for {
		e := a.waitEpoch(t, "node-a", "node-b", "node-c")
		var w []string
		for _, m := range e.GetMembers() {
			w = append(w, strconv.Itoa(int(m.GetWeight())))
		}
		got = append(got, strings.Join(w, ","))
		if e.GetMembers()[0].GetWeight() == 0 {
			break // the ramp is over: weights as registered (0 means 1)
		}
	}
	if want := []string{"4,4,1", "4,4,2", "4,4,3", "0,0,0"}; !slices.Equal(got, want) {
		t.Fatalf("weights of the epochs after node-c joined: %v, want %v", got, want)
	}
}

// The key templates the control plane once accepted and every node then
// refused: through the control plane they are now refused, naming the field
// and the reason, and nothing reaches etcd.
func TestTemplatesNodesRefuseAreRefusedBeforeEtcd(t *testing.T) {
	s, _, _ := startServer(t, nil)
	admin := pb.NewAdminServiceClient(dial(t, s))
	ctx := adminCtx(context.Background(), testToken)
	tests := []struct{ tmpl, reason string }{
		{"$Host$request_uri", "starts no variable"},
		{"$1$uri", "unknown variable $1"},
		{"$host$request_uri$", "starts no variable"},
		{"$host$http_", "names no header"},
		{"$host$cookie_$uri", "names no header or cookie"},
	}
	for i, tt := range tests {
		t.Run(tt.tmpl, func(t *testing.T) {
			p := &pb.CachePolicy{Name: fmt.Sprintf("t%d", i), PathPrefix: fmt.Sprintf("/t%d/", i), KeyTemplate: tt.tmpl}
			_, err := admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: p})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("PutPolicy(%q): %v, want InvalidArgument", tt.tmpl, err)
			}
			var fields []string
			for _, d := range status.Convert(err).Details() {
				if br, ok := d.(*errdetails.BadRequest); ok {
					for _, v := range br.GetFieldViolations() {
						fields = append(fields, v.GetField())
						if v.GetField() == "key_template" && !strings.Contains(v.GetDescription(), tt.reason) {
							t.Errorf("key_template violation %q does not say %q", v.GetDescription(), tt.reason)
						}
					}
				}
			}
			if !slices.Equal(fields, []string{"key_template"}) {
				t.Fatalf("violations name %v, want key_template alone (%v)", fields, err)
			}
		})
	}
	resp, err := s.state.kv.Get(context.Background(), s.state.policiesPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("%d policy keys written to etcd for refused policies: %s", len(resp.Kvs), resp.Kvs[0].Key)
	}
}

// PutPolicies writes all of its policies or none: one invalid among them
// (or one that overlaps another of them) leaves the stored set as it was;
// a batch over the bound is refused.
func TestPutPoliciesIsAllOrNothing(t *testing.T) {
	s, _, _ := startServer(t, []string{testEtcd(t)})
	admin := pb.NewAdminServiceClient(dial(t, s))
	ctx := adminCtx(context.Background(), testToken)
	list := func() []*pb.CachePolicy {
		resp, err := admin.ListPolicies(ctx, &pb.ListPoliciesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetPolicies()
	}
	good := []*pb.CachePolicy{{Name: "a", PathPrefix: "/a/"}, {Name: "b", PathPrefix: "/b/"}}
	for name, batch := range map[string][]*pb.CachePolicy{
		"an invalid third":        append(slices.Clone(good), &pb.CachePolicy{Name: "c", PathPrefix: "/c/", KeyTemplate: "$1$uri"}),
		"two matching one prefix": append(slices.Clone(good), &pb.CachePolicy{Name: "c", PathPrefix: "/a/"}),
		"a name given twice":      append(slices.Clone(good), &pb.CachePolicy{Name: "a", PathPrefix: "/z/"}),
	} {
		_, err := admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: batch})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: %v, want InvalidArgument", name, err)
		}
		if got := list(); len(got) != 0 {
			t.Fatalf("%s: %d policies stored after a refused batch, want none", name, len(got))
		}
	}
	resp, err := admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: good})
	if err != nil || len(resp.GetPolicies()) != 2 || resp.GetPolicies()[0].GetRevision() != resp.GetPolicies()[1].GetRevision() {
		t.Fatalf("a valid batch: %v, %v; want both stored at one revision", resp, err)
	}
	if got := list(); len(got) != 2 {
		t.Fatalf("%d policies stored, want 2", len(got))
	}
	var many []*pb.CachePolicy
	for i := range maxPoliciesPerApply + 1 {
		many = append(many, &pb.CachePolicy{Name: fmt.Sprintf("p%d", i), PathPrefix: fmt.Sprintf("/p%d/", i)})
	}
	if _, err := admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: many}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("%d policies at once: %v, want InvalidArgument", len(many), err)
	}
	if _, err := admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: many[:maxPoliciesPerApply]}); err != nil {
		t.Fatalf("%d policies at once, the bound: %v", maxPoliciesPerApply, err)
	}

	// The set a snapshot carries is bounded: in count and in each policy's size.
	hosts := make([]string, 300)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("shop-%03d.example.com", i)
	}
	_, err = admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: []*pb.CachePolicy{{Name: "big", PathPrefix: "/big/", Hosts: hosts}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a policy has at most") {
		t.Fatalf("a policy of %d bytes: %v, want InvalidArgument naming the size bound", proto.Size(&pb.CachePolicy{Hosts: hosts}), err)
	}
	have := len(list())
	for start := have; start < maxPolicies; start += maxPoliciesPerApply {
		var batch []*pb.CachePolicy
		for i := start; i < min(start+maxPoliciesPerApply, maxPolicies); i++ {
			batch = append(batch, &pb.CachePolicy{Name: fmt.Sprintf("q%d", i), PathPrefix: fmt.Sprintf("/q%d/", i)})
		}
		if _, err := admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: batch}); err != nil {
			t.Fatalf("filling the set to %d: %v", maxPolicies, err)
		}
	}
	_, err = admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: []*pb.CachePolicy{{Name: "one-more", PathPrefix: "/one-more/"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 500") {
		t.Fatalf("policy %d: %v, want InvalidArgument naming the bound", maxPolicies+1, err)
	}
	// Replacing one at the bound still works.
	if _, err := admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: []*pb.CachePolicy{{Name: fmt.Sprintf("q%d", have), PathPrefix: fmt.Sprintf("/q%d/", have), DefaultTtl: durationpb.New(time.Minute)}}}); err != nil {
		t.Fatalf("replacing a policy at the bound: %v", err)
	}
}

// A node that refuses a policy push is sent the whole set at the next
// change, not an increment over what it never applied.
func TestARefusedPolicyPushIsFollowedByTheWholeSet(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	node := openSession(t, conn, "node-a")
	put := func(name string) {
		t.Helper()
		if _, err := admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: &pb.CachePolicy{Name: name, PathPrefix: "/" + name + "/"}}); err != nil {
			t.Fatal(err)
		}
	}
	ack := func(a *pb.PolicyAck) {
		t.Helper()
		if err := node.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PolicyAck{PolicyAck: a}}); err != nil {
			t.Fatal(err)
		}
	}
	put("one")
	first := node.recvPolicies(t)
	ack(&pb.PolicyAck{AppliedRevision: first.GetRevision()})
	put("two")
	second := node.recvPolicies(t)
	if !second.GetIncremental() {
		t.Fatalf("second push %v, want an increment", second)
	}
	// The node refuses it and keeps the first set.
	ack(&pb.PolicyAck{AppliedRevision: first.GetRevision(), RefusedRevision: second.GetRevision(), Error: "refused for the test"})
	// Once the status shows the refusal, the session has read the ack.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := admin.PolicyStatus(ctx, &pb.PolicyStatusRequest{})
		if err == nil && len(resp.GetNodes()) == 1 && resp.GetNodes()[0].GetRefusedRevision() == second.GetRevision() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refusal is not in the policy status: %v, %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	put("three")
	third := node.recvPolicies(t)
	if third.GetIncremental() || len(third.GetPolicies()) != 3 {
		t.Fatalf("the push after a refusal: %v; want the whole set of 3", third)
	}
}
