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
