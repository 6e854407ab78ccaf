package controlplane

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Every member is in every epoch pushed to every node: the ring holds at
// most MaxMembers, a hello from a new id past it is refused, and a place
// a member leaves is taken again.
func TestTheRingHoldsAtMostMaxMembers(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.MaxMembers = 2 })
	conn := dial(t, s)
	n1 := openSession(t, conn, "n1")
	openSession(t, conn, "n2")
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 2 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := sayHello(t, ctx, conn, &pb.Hello{Member: &pb.Member{Id: "n3", PeerAddress: "127.0.0.1:9999"}}).Recv()
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "--max-members") {
		t.Fatalf("a third member's hello: %v; want RESOURCE_EXHAUSTED naming --max-members", err)
	}

	if err := n1.stream.CloseSend(); err != nil { // goodbye: n1 leaves at once
		t.Fatal(err)
	}
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 1 })
	openSession(t, conn, "n3")
}

// A drained member is out of the epoch but still a member: it holds its
// registration (and its drain), and an operator undrains it. When the ring
// is full meanwhile, its session breaking (a replica restarting, a network
// blip) must not lock it out: its hello is its own id's, not a new one's.
func TestADrainedMemberReconnectsWhenTheRingIsFull(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.MaxMembers = 2 })
	conn := dial(t, s)
	n1 := openSession(t, conn, "n1")
	openSession(t, conn, "n2")
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 2 })
	admin := pb.NewAdminServiceClient(conn)
	if _, err := admin.DrainNode(adminCtx(context.Background(), testToken), &pb.DrainNodeRequest{NodeId: "n1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 1 })
	openSession(t, conn, "n3") // the place n1 left
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 2 })

	n1.cancel() // the stream breaks: n1 stays registered for the lease TTL
	var err error
	waitFor(t, func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err = sayHello(t, ctx, conn, &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999", PublicUrl: "http://n1"}}).Recv()
		return err == nil || status.Code(err) == codes.ResourceExhausted
	})
	if err != nil {
		t.Fatalf("the drained member's hello after its session broke: %v; want its snapshot", err)
	}
}
