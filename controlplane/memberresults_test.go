package controlplane

import (
	"strings"
	"testing"
	"time"

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
