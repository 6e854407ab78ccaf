package controlplane

import (
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A member answers for its own purge results, never for whether the
// replica can record the others': a result too large for one etcd
// transaction (an error of 2 MiB, a purge id or unknown fields of as
// much) must not hold
// back the watermark record every node's acknowledgement is written in.
func TestAMembersOversizedPurgeResultHoldsBackNoAcknowledgement(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result func(p *pb.Purge) *pb.PurgeResult
	}{
		{"error", func(p *pb.Purge) *pb.PurgeResult {
			return &pb.PurgeResult{PurgeId: p.GetId(), Error: strings.Repeat("e", 2<<20)}
		}},
		{"purge id", func(p *pb.Purge) *pb.PurgeResult {
			return &pb.PurgeResult{PurgeId: p.GetId() + strings.Repeat("x", 2<<20), ObjectsRemoved: 1}
		}},
		{"unknown fields", func(p *pb.Purge) *pb.PurgeResult {
			r := &pb.PurgeResult{PurgeId: p.GetId(), ObjectsRemoved: 1}
			r.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 1000, protowire.BytesType), []byte(strings.Repeat("u", 2<<20))))
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, conn, admin, ctx := ackingReplica(t, 50*time.Millisecond, 2)
			evil := openSession(t, conn, "evil")
			waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 3 })
			go func() {
				p := evil.recvPurge(t)
				// The oversized result first, then the plain
				// acknowledgement: both go into the same batch.
				for _, r := range []*pb.PurgeResult{tc.result(p), {RevisionApplied: p.GetRevision()}} {
					if err := evil.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PurgeResult{PurgeResult: r}}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "one", Url: "http://example.com/one", Wait: durationpb.New(10 * time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			if st := resp.GetStatus(); !st.GetComplete() {
				t.Fatalf("purge status %v: want it complete, every node having applied it", st)
			}
			for _, r := range resp.GetStatus().GetResults() {
				if len(r.GetError()) > maxNodeError+64 || len(r.GetPurgeId()) > 128 {
					t.Errorf("result of %s kept %d bytes of error, a purge id of %d", r.GetNodeId(), len(r.GetError()), len(r.GetPurgeId()))
				}
			}
		})
	}
}

// A result naming a purge that was never recorded is not written: the
// leader deletes a purge's results with the purge, so those of a purge
// that does not exist would stay in etcd for good, a member growing it
// a batch at a time.
func TestAResultForAPurgeNeverRecordedIsNotWritten(t *testing.T) {
	s, conn, admin, ctx := ackingReplica(t, 50*time.Millisecond, 1)
	evil := openSession(t, conn, "evil")
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 2 })
	go func() {
		p := evil.recvPurge(t)
		for _, r := range []*pb.PurgeResult{
			{PurgeId: "ghost-1", ObjectsRemoved: 1},
			{PurgeId: p.GetId(), ObjectsRemoved: 2, RevisionApplied: p.GetRevision()},
		} {
			if err := evil.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PurgeResult{PurgeResult: r}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "one", Url: "http://example.com/one", Wait: durationpb.New(10 * time.Second)})
	if err != nil || !resp.GetStatus().GetComplete() {
		t.Fatalf("purge: %v, %v; want it complete", resp.GetStatus(), err)
	}
	// Sent after the ghost's, the real result is written in the same batch
	// or a later one.
	waitFor(t, func() bool {
		r, err := s.state.kv.Get(ctx, s.state.purgeAckKey("one", "evil"))
		return err == nil && len(r.Kvs) == 1
	})
	r, err := s.state.kv.Get(ctx, s.state.purgeAcksPrefix("ghost-1"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != 0 {
		t.Fatalf("results of a purge never recorded: %d, %v; want none written", r.Count, err)
	}
}
