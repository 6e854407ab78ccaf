package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
