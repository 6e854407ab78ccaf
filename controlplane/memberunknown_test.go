package controlplane

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A member's fields are bounded (hello.go), and so is what it sends
// in fields this control plane does not know: a member is
// answered in ListNodes pages and kept in etcd twice, so half a megabyte
// of an unknown field in a hello rode its member and status records and
// every ListNodes page that named it (a handful of them broke the page).
// A hello whose member carries more unknown bytes than a few fields of
// a newer version need is refused; the ring never sees it.
func TestAMembersUnknownFieldsAreBounded(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	n1 := openSession(t, conn, "n1")

	m := &pb.Member{Id: "evil", PeerAddress: "127.0.0.1:9999"}
	m.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 1000, protowire.BytesType), []byte(strings.Repeat("x", 512<<10))))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := sayHello(t, ctx, conn, &pb.Hello{Member: m})
	for {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("hello with 512 KiB of unknown member fields: %v; want InvalidArgument", err)
			}
			break
		}
		if snap := resp.GetSnapshot(); snap != nil {
			n1.waitEpoch(t, "evil", "n1")
			list, err := pb.NewAdminServiceClient(conn).ListNodes(adminCtx(ctx, testToken), &pb.ListNodesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range list.GetNodes() {
				t.Logf("ListNodes: %s with %d bytes of unknown member fields", n.GetMember().GetId(), len(n.GetMember().ProtoReflect().GetUnknown()))
			}
			t.Fatalf("hello with 512 KiB of unknown member fields was admitted; its member record holds %d bytes of them",
				len(memberRecord(t, s, "evil").ProtoReflect().GetUnknown()))
		}
	}
	// A few bytes of a newer version's fields pass.
	small := &pb.Member{Id: "newer", PeerAddress: "127.0.0.1:9998"}
	small.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 12, protowire.BytesType), "a field of a newer version"))
	openSessionWith(t, conn, &pb.Hello{Member: small})
}

// A load report is kept in memory and answered in ListNodes: unknown
// fields past the bound are left out of it, the report's figures kept.
func TestALoadReportsUnknownFieldsAreBounded(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	a := openSession(t, conn, "node-a")
	a.waitEpoch(t, "node-a")
	load := &pb.LoadReport{Epoch: 1, RequestsTotal: 42}
	load.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 1000, protowire.BytesType), []byte(strings.Repeat("x", 512<<10))))
	if err := a.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Load{Load: load}}); err != nil {
		t.Fatal(err)
	}
	admin := pb.NewAdminServiceClient(conn)
	var got *pb.LoadReport
	waitFor(t, func() bool {
		resp, err := admin.ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got = resp.GetNodes()[0].GetLoad()
		return got.GetRequestsTotal() == 42
	})
	if u := len(got.ProtoReflect().GetUnknown()); u > 1<<10 {
		t.Fatalf("ListNodes answers node-a's load report with %d bytes of unknown fields", u)
	}
}
