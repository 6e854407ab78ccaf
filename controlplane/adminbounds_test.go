package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Purges a node relays for its clients (each named and proven with the
// node's join token) are bounded per client: one client's purge storm
// through a node must not hold back another client's purges through the
// same node.
func TestARelayedPurgeStormSpendsOnlyItsClientsBudget(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.JoinToken = "join-secret"; c.PurgeRate, c.PurgeBurst = 0.001, 5 })
	openSessionWith(t, dial(t, s), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:1"}, JoinToken: "join-secret"})
	admin := pb.NewAdminServiceClient(dial(t, s))
	for i := range 5 {
		if _, err := admin.PurgeTag(relayedCtx(testToken, "198.51.100.7", "join-secret"),
			&pb.PurgeTagRequest{Tag: fmt.Sprint("storm-", i), Wait: durationpb.New(100 * time.Millisecond)}); err != nil {
			t.Fatalf("storm purge %d within the burst: %v", i, err)
		}
	}
	_, err := admin.Purge(relayedCtx(testToken, "203.0.113.9", "join-secret"),
		&pb.PurgeRequest{Url: "http://example.com/other-client", Wait: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatalf("another client's first purge through the same node, after 198.51.100.7's storm: %v", err)
	}
}

// An admin call with a huge malformed field gets a clear InvalidArgument
// naming the field, not an echo of the whole input.
func TestAHugeRequestIDIsNotEchoedWhole(t *testing.T) {
	s, _, _ := startServer(t, nil)
	admin := pb.NewAdminServiceClient(dial(t, s))
	ctx := adminCtx(context.Background(), testToken)
	huge := strings.Repeat("x", 1<<20) + "!"
	_, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: huge, Url: "http://example.com/a"}, grpc.MaxCallRecvMsgSize(16<<20))
	st := status.Convert(err)
	t.Logf("Purge with a 1 MiB request id: code %s, message %d bytes: %.120s", st.Code(), len(st.Message()), st.Message())
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "request id") || len(st.Message()) > 8<<10 {
		t.Fatalf("want InvalidArgument naming the request id, briefly")
	}
}

func TestHugeNamesInReadsAreNotEchoedWhole(t *testing.T) {
	s, _, _ := startServer(t, nil)
	admin := pb.NewAdminServiceClient(dial(t, s))
	ctx := adminCtx(context.Background(), testToken)
	huge := strings.Repeat("n", 1<<20)
	for name, call := range map[string]func() error{
		"GetPolicy":    func() error { _, err := admin.GetPolicy(ctx, &pb.GetPolicyRequest{Name: huge}); return err },
		"DrainNode":    func() error { _, err := admin.DrainNode(ctx, &pb.DrainNodeRequest{NodeId: huge}); return err },
		"DeletePolicy": func() error { _, err := admin.DeletePolicy(ctx, &pb.DeletePolicyRequest{Name: huge}); return err },
		"Warm": func() error {
			st, err := admin.Warm(ctx, &pb.WarmRequest{Node: huge})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	} {
		st := status.Convert(call())
		t.Logf("%s with a 1 MiB name: code %s, message %d bytes: %.100s", name, st.Code(), len(st.Message()), st.Message())
		if st.Code() != codes.InvalidArgument && st.Code() != codes.NotFound || len(st.Message()) > 8<<10 {
			t.Errorf("%s: want InvalidArgument/NotFound with a short message", name)
		}
	}
}

// ListNodes answers a page of at most maxNodesPage nodes, whatever the
// caller asks and however many nodes registered (anyone holding the join
// token may register one): at the bound the answer carries a page token,
// and the pages together list every node once, in id order.
func TestListNodesAnswersPagesOfAtMostTheBound(t *testing.T) {
	s, _, _ := startServer(t, nil)
	ctx := context.Background()
	total := maxNodesPage + 3
	want := registerNodes(t, s, total, nil)
	admin := pb.NewAdminServiceClient(dial(t, s))
	actx := adminCtx(ctx, testToken)

	for _, size := range []int32{0, maxNodesPage + 1, 1 << 30} {
		resp, err := admin.ListNodes(actx, &pb.ListNodesRequest{PageSize: size})
		if err != nil {
			t.Fatalf("page size %d: %v", size, err)
		}
		if len(resp.GetNodes()) != maxNodesPage || resp.GetNextPageToken() == "" {
			t.Fatalf("page size %d with %d nodes registered: %d nodes, next page token %q; want %d and a token",
				size, total, len(resp.GetNodes()), resp.GetNextPageToken(), maxNodesPage)
		}
	}

	// Following the pages lists every node once, in order; the last page
	// has no token.
	var got []string
	token, pages := "", 0
	for {
		resp, err := admin.ListNodes(actx, &pb.ListNodesRequest{PageSize: 200, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(resp.GetNodes()) > 200 {
			t.Fatalf("page %d: %d nodes, asked for 200", pages, len(resp.GetNodes()))
		}
		for _, n := range resp.GetNodes() {
			got = append(got, n.GetMember().GetId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if pages > total {
			t.Fatal("the pages do not end")
		}
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages listed %d nodes (%v...), want 3 pages listing the %d registered in id order", pages, len(got), got[:min(3, len(got))], total)
	}

	// A bad page size or token is refused, briefly.
	for name, req := range map[string]*pb.ListNodesRequest{
		"negative page size": {PageSize: -1},
		"forged page token":  {PageToken: "not base64!"},
		"huge page token":    {PageToken: strings.Repeat("A", 1<<20)},
	} {
		_, err := admin.ListNodes(actx, req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || len(st.Message()) > 8<<10 {
			t.Errorf("%s: %v, want a short InvalidArgument", name, err)
		}
	}
}

// Every member goes into every ring epoch pushed to every node: a hello
// whose member carries an oversized field (anyone holding the join token
// may say one) is refused, briefly, so that a few registrations cannot make
// the ring outgrow the 4 MiB messages that carry it. (A field of 256 KiB
// used to be registered: sixteen such made every epoch push fail.)
func TestAHelloWithAnOversizedMemberFieldIsRefused(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.JoinToken = "join-secret" })
	conn := dial(t, s)
	big := strings.Repeat("z", 256<<10)
	for name, m := range map[string]*pb.Member{
		"zone":         {Id: "n1", PeerAddress: "127.0.0.1:1", Zone: big},
		"public URL":   {Id: "n1", PeerAddress: "127.0.0.1:1", PublicUrl: "http://" + big},
		"ops URL":      {Id: "n1", PeerAddress: "127.0.0.1:1", OpsUrl: "http://" + big},
		"version":      {Id: "n1", PeerAddress: "127.0.0.1:1", Version: big},
		"peer hop":     {Id: "n1", PeerAddress: "127.0.0.1:1", PeerHop: big},
		"peer address": {Id: "n1", PeerAddress: big + ":1"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		stream := sayHello(t, ctx, conn, &pb.Hello{Member: m, JoinToken: "join-secret"})
		_, err := stream.Recv()
		cancel()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), name) || len(st.Message()) > 8<<10 {
			t.Errorf("a member with a 256 KiB %s: %s %.200s; want a short InvalidArgument naming it", name, st.Code(), st.Message())
		}
	}
	// cachectl shows these fields on an operator's terminal: an escape
	// sequence (or any byte that is not printable ASCII) is refused.
	for name, m := range map[string]*pb.Member{
		"zone":       {Id: "n1", PeerAddress: "127.0.0.1:1", Zone: "eu-1\x1b]8;;http://evil/\x1b\\"},
		"version":    {Id: "n1", PeerAddress: "127.0.0.1:1", Version: "v1\r\nnode-2 ACTIVE"},
		"public URL": {Id: "n1", PeerAddress: "127.0.0.1:1", PublicUrl: "http://n1\u202e.example"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		stream := sayHello(t, ctx, conn, &pb.Hello{Member: m, JoinToken: "join-secret"})
		_, err := stream.Recv()
		cancel()
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), name) || !strings.Contains(st.Message(), "printable") {
			t.Errorf("a member whose %s holds a control character: %s %.200s; want InvalidArgument naming it", name, st.Code(), st.Message())
		}
	}
	resp, err := pb.NewAdminServiceClient(conn).ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{})
	if err != nil || len(resp.GetNodes()) != 0 {
		t.Fatalf("ListNodes after the refused hellos: %d nodes, %v; want none registered", len(resp.GetNodes()), err)
	}
}

// What a node says in its session is kept per node and answered in
// ListNodes pages: a load report naming a hundred thousand routes and a
// policy refusal with a 1 MiB reason are kept within their bounds, so one
// node cannot make the page that lists it outgrow a message.
func TestANodesReportsAreKeptWithinTheirBounds(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	node := openSession(t, conn, "n1")
	routes := map[string]uint64{}
	for i := range 100_000 {
		routes[fmt.Sprint("route-", i)] = uint64(i)
	}
	n := reportAndList(t, conn, node, routes, strings.Repeat("e", 1<<20))
	t.Logf("kept: %d routes, a policy error of %d bytes, a node of %d bytes", len(n.GetLoad().GetResponseBytesByRoute()),
		len(n.GetPolicyError()), proto.Size(n))
	if len(n.GetLoad().GetResponseBytesByRoute()) > maxLoadRoutes || len(n.GetPolicyError()) > maxNodeError+64 {
		t.Fatalf("kept %d routes and a policy error of %d bytes; want at most %d and about %d",
			len(n.GetLoad().GetResponseBytesByRoute()), len(n.GetPolicyError()), maxLoadRoutes, maxNodeError)
	}
}

// registerNodes writes the member records of total nodes, node-0000 and
// on, straight to etcd, with stat (if not nil) the status record of the
// j-th; it returns their ids in order.
func registerNodes(t *testing.T, s *Server, total int, stat func(j int) *pb.Node) []string {
	t.Helper()
	var ids []string
	// A transaction takes at most 128 operations, two a node here.
	for i := 0; i < total; i += 50 {
		var ops []clientv3.Op
		for j := i; j < min(i+50, total); j++ {
			id := fmt.Sprintf("node-%04d", j)
			b, err := proto.Marshal(&pb.Member{Id: id, PeerAddress: fmt.Sprintf("127.0.0.1:%d", 10000+j)})
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(s.state.memberKey(id), string(b)))
			if stat != nil {
				b, err := proto.Marshal(stat(j))
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, clientv3.OpPut(s.state.statusKey(id), string(b)))
			}
			ids = append(ids, id)
		}
		if _, err := s.etcd.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			t.Fatalf("registering members: %v", err)
		}
	}
	return ids
}

// PolicyStatus answers, like ListNodes, a page of at most maxNodesPage
// nodes (each up to about 1.2 KiB with its refusal, so 10,000 nodes in one
// answer would pass gRPC's 4 MiB limit): at the bound the answer carries a
// page token, every page carries the current revision of the policy set,
// and the pages together give every node's state once, in id order.
func TestPolicyStatusAnswersPagesOfAtMostTheBound(t *testing.T) {
	s, _, _ := startServer(t, nil)
	ctx := context.Background()
	total := maxNodesPage + 3
	reason := strings.Repeat("r", 1000)
	want := registerNodes(t, s, total, func(j int) *pb.Node {
		return &pb.Node{PolicyRevision: int64(j), PolicyRefusedRevision: int64(j + 1), PolicyError: reason}
	})
	admin := pb.NewAdminServiceClient(dial(t, s))
	actx := adminCtx(ctx, testToken)
	if _, err := admin.PutPolicy(actx, &pb.PutPolicyRequest{Policy: &pb.CachePolicy{Name: "images", PathPrefix: "/img/"}}); err != nil {
		t.Fatal(err)
	}
	list, err := admin.ListPolicies(actx, &pb.ListPoliciesRequest{})
	if err != nil || list.GetRevision() == 0 {
		t.Fatalf("ListPolicies: %v, %v; want a revision", list, err)
	}
	rev := list.GetRevision()

	for _, size := range []int32{0, maxNodesPage + 1, 1 << 30} {
		resp, err := admin.PolicyStatus(actx, &pb.PolicyStatusRequest{PageSize: size})
		if err != nil {
			t.Fatalf("page size %d: %v", size, err)
		}
		if len(resp.GetNodes()) != maxNodesPage || resp.GetNextPageToken() == "" || resp.GetRevision() != rev {
			t.Fatalf("page size %d with %d nodes registered: %d nodes, next page token %q, revision %d; want %d, a token and revision %d",
				size, total, len(resp.GetNodes()), resp.GetNextPageToken(), resp.GetRevision(), maxNodesPage, rev)
		}
	}

	// Following the pages gives every node once, in order, with its state;
	// the last page has no token.
	var got []string
	token, pages := "", 0
	for {
		resp, err := admin.PolicyStatus(actx, &pb.PolicyStatusRequest{PageSize: 200, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(resp.GetNodes()) > 200 || resp.GetRevision() != rev {
			t.Fatalf("page %d: %d nodes, revision %d; asked for 200, want revision %d", pages, len(resp.GetNodes()), resp.GetRevision(), rev)
		}
		for _, n := range resp.GetNodes() {
			j := len(got)
			if n.GetAppliedRevision() != int64(j) || n.GetRefusedRevision() != int64(j+1) || n.GetError() != reason {
				t.Fatalf("node %s: applied %d, refused %d, error of %d bytes; want %d, %d, %d",
					n.GetNodeId(), n.GetAppliedRevision(), n.GetRefusedRevision(), len(n.GetError()), j, j+1, len(reason))
			}
			got = append(got, n.GetNodeId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if pages > total {
			t.Fatal("the pages do not end")
		}
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages listed %d nodes (%v...), want 3 pages listing the %d registered in id order", pages, len(got), got[:min(3, len(got))], total)
	}

	// A bad page size or token is refused, briefly.
	for name, req := range map[string]*pb.PolicyStatusRequest{
		"negative page size": {PageSize: -1},
		"forged page token":  {PageToken: "not base64!"},
		"huge page token":    {PageToken: strings.Repeat("A", 1<<20)},
	} {
		_, err := admin.PolicyStatus(actx, req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || len(st.Message()) > 8<<10 {
			t.Errorf("%s: %v, want a short InvalidArgument", name, err)
		}
	}
}

// What a node writes in its own words (a policy refusal's reason, a
// purge's error, its routes' names) is shown by cachectl on an operator's
// terminal: a control character or an override arrives escaped.
func TestANodesOwnWordsReachOperatorsEscaped(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	node := openSession(t, conn, "n1")
	n := reportAndList(t, conn, node, map[string]uint64{"local": 1, "\x1b[2Jforged": 2}, "bad\x1b]8;;http://evil/\x07policy\u202e")
	shown := n.GetPolicyError()
	for r := range n.GetLoad().GetResponseBytesByRoute() {
		shown += " " + r
	}
	if strings.ContainsAny(shown, "\x1b\x07\u202e") || !strings.Contains(shown, "policy") {
		t.Fatalf("a node's words reach ListNodes as %q; want them escaped", shown)
	}
}

// reportAndList sends, on node's session, a load report of 7 requests with
// routes and a refusal of policy revision 3 for reason, and returns the
// node as ListNodes shows it once both are kept.
func reportAndList(t *testing.T, conn *grpc.ClientConn, node *nodeSession, routes map[string]uint64, reason string) *pb.Node {
	t.Helper()
	if err := node.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Load{Load: &pb.LoadReport{
		RequestsTotal: 7, ResponseBytesByRoute: routes}}}); err != nil {
		t.Fatal(err)
	}
	if err := node.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PolicyAck{PolicyAck: &pb.PolicyAck{
		RefusedRevision: 3, Error: reason}}}); err != nil {
		t.Fatal(err)
	}
	admin := pb.NewAdminServiceClient(conn)
	var n *pb.Node
	waitFor(t, func() bool {
		resp, err := admin.ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{})
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		n = resp.GetNodes()[0]
		return n.GetLoad().GetRequestsTotal() == 7 && n.GetPolicyRefusedRevision() == 3
	})
	return n
}
