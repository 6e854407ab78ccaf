package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// helloFrom is a hello for id from the process instance, at peer.
func helloFrom(id, instance, peer string) *pb.Hello {
	return &pb.Hello{Member: &pb.Member{Id: id, PeerAddress: peer}, Instance: instance}
}

// sessionEndOf returns the status code and SessionEnd reason err carries.
func sessionEndOf(t *testing.T, err error) (codes.Code, pb.SessionEnd) {
	t.Helper()
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == pb.SessionEndDomain {
			return st.Code(), pb.SessionEnd(pb.SessionEnd_value[info.GetReason()])
		}
	}
	return st.Code(), pb.SessionEnd_SESSION_END_UNSPECIFIED
}

// refusedHello says hello and returns the error the stream ends with.
func refusedHello(t *testing.T, conn *grpc.ClientConn, hello *pb.Hello) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := sayHello(t, ctx, conn, hello).Recv()
	if err == nil {
		t.Fatalf("hello %v answered with %T, want a refusal", hello, resp.GetMsg())
	}
	return err
}

// memberRecord reads id's member record from etcd (nil when there is none).
func memberRecord(t *testing.T, s *Server, id string) *pb.Member {
	t.Helper()
	resp, err := s.state.kv.Get(context.Background(), s.state.memberKey(id))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	m := &pb.Member{}
	if err := proto.Unmarshal(resp.Kvs[0].Value, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// recvEnd reads the stream until it ends and returns how.
func (n *nodeSession) recvEnd(t *testing.T) error {
	t.Helper()
	_, err := n.recvUntil(func(*pb.SessionResponse) bool { return false })
	return err
}

func TestASecondProcessWithALiveIDIsRefused(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	live, _ := openSessionWith(t, conn, helloFrom("node-2", "first", "127.0.0.1:9002"))
	live.waitEpoch(t, "node-2")

	err := refusedHello(t, conn, helloFrom("node-2", "second", "127.0.0.1:9999"))
	if code, end := sessionEndOf(t, err); code != codes.AlreadyExists || end != pb.SessionEnd_SESSION_END_DUPLICATE_ID {
		t.Fatalf("second process: %v (%s, %s), want AlreadyExists with DUPLICATE_ID", err, code, end)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "127.0.0.1:9002") {
		t.Fatalf("refusal %q does not name the live session's peer", msg)
	}
	if m := memberRecord(t, s, "node-2"); m.GetPeerAddress() != "127.0.0.1:9002" {
		t.Fatalf("after the refusal the member record names %q, want the live node's 127.0.0.1:9002", m.GetPeerAddress())
	}
	nodes, err := pb.NewAdminServiceClient(conn).ListNodes(adminCtx(context.Background(), testToken), &pb.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r := nodes.GetNodes()[0].GetLastRefused()
	if r.GetPeerAddress() != "127.0.0.1:9999" || r.GetAt() == nil || !strings.Contains(r.GetReason(), "open session") {
		t.Fatalf("ListNodes shows the refused hello as %v", r)
	}

	// The live session stays whole: it still gets heartbeats, and its
	// record is still its own.
	if _, err := live.recvUntil(func(r *pb.SessionResponse) bool { return r.GetHeartbeat() != nil }); err != nil {
		t.Fatalf("live session after the refusal: %v", err)
	}

	// Once the live stream has ended (broken, not a goodbye: its member
	// record stays until the lease expires), the newcomer is admitted at
	// once and takes the record over.
	live.cancel()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := sayHello(t, ctx, conn, helloFrom("node-2", "second", "127.0.0.1:9999")).Recv()
		if err == nil && resp.GetSnapshot() != nil {
			defer cancel()
			break
		}
		cancel()
		if code, _ := sessionEndOf(t, err); code != codes.AlreadyExists || time.Now().After(deadline) {
			t.Fatalf("newcomer after the live stream ended: %v", err)
		}
		// The server notices the cancelled stream asynchronously.
		time.Sleep(20 * time.Millisecond)
	}
	if m := memberRecord(t, s, "node-2"); m.GetPeerAddress() != "127.0.0.1:9999" {
		t.Fatalf("after the takeover the member record names %q", m.GetPeerAddress())
	}
}

func TestAReconnectOfTheSameProcessTakesItsSessionOver(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	old, _ := openSessionWith(t, conn, helloFrom("node-1", "proc", "127.0.0.1:9001"))
	// The same process again (its old stream not yet noticed as gone).
	_, snap := openSessionWith(t, conn, helloFrom("node-1", "proc", "127.0.0.1:9001"))
	if got := snap.GetHeartbeatInterval().AsDuration(); got != 500*time.Millisecond {
		t.Fatalf("heartbeat interval %s, want a quarter of the 2s lease", got)
	}
	err := old.recvEnd(t)
	if code, end := sessionEndOf(t, err); code != codes.Aborted || end != pb.SessionEnd_SESSION_END_SUPERSEDED {
		t.Fatalf("the superseded stream ended with %v (%s, %s), want Aborted with SUPERSEDED", err, code, end)
	}
	if m := memberRecord(t, s, "node-1"); m == nil {
		t.Fatal("the member record went with the superseded session")
	}
}

func TestAChangedMemberRecordEndsTheSession(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	kv := s.state.kv
	ctx := context.Background()
	tests := []struct {
		name   string
		change func(key string) error
		want   pb.SessionEnd
	}{
		{"deleted", func(key string) error { _, err := kv.Delete(ctx, key); return err }, pb.SessionEnd_SESSION_END_RECORD_DELETED},
		{"replaced", func(key string) error {
			b, _ := proto.Marshal(&pb.Member{Id: "node-3", PeerAddress: "127.0.0.1:1"})
			_, err := kv.Put(ctx, key, string(b))
			return err
		}, pb.SessionEnd_SESSION_END_RECORD_REPLACED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, _ := openSessionWith(t, conn, helloFrom("node-3", "proc-"+tt.name, "127.0.0.1:9003"))
			if err := tt.change(s.state.memberKey("node-3")); err != nil {
				t.Fatal(err)
			}
			err := n.recvEnd(t)
			if code, end := sessionEndOf(t, err); code != codes.FailedPrecondition || end != tt.want {
				t.Fatalf("session ended with %v (%s, %s), want FailedPrecondition with %s", err, code, end, tt.want)
			}
			// It registers again at once: its own session is gone.
			again, _ := openSessionWith(t, conn, helloFrom("node-3", "proc-"+tt.name, "127.0.0.1:9003"))
			if m := memberRecord(t, s, "node-3"); m.GetPeerAddress() != "127.0.0.1:9003" {
				t.Fatalf("after registering again the record names %q", m.GetPeerAddress())
			}
			again.stream.CloseSend() // a goodbye, so the next case starts without the record
			again.recvEnd(t)
		})
	}
}
