package controlplane

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Every change of the policy set is in the history with what it replaced;
// applying a policy unchanged writes nothing; the history keeps
// PolicyHistory changes, and a rollback to a kept revision restores the
// set as it was (creating, changing and deleting policies), while one to a
// forgotten revision is refused naming the oldest kept.
func TestPolicyHistoryAndRollback(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.PolicyHistory = 4 })
	admin := pb.NewAdminServiceClient(dial(t, s))
	ctx := adminCtx(context.Background(), testToken)
	put := func(ps ...*pb.CachePolicy) int64 {
		t.Helper()
		resp, err := admin.PutPolicies(ctx, &pb.PutPoliciesRequest{Policies: ps})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetPolicies()[0].GetRevision()
	}
	set := func() map[string]*pb.CachePolicy {
		t.Helper()
		resp, err := admin.ListPolicies(ctx, &pb.ListPoliciesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*pb.CachePolicy{}
		for _, p := range resp.GetPolicies() {
			p.Revision = 0
			m[p.GetName()] = p
		}
		return m
	}
	a1 := &pb.CachePolicy{Name: "a", PathPrefix: "/a/", MaxVariants: 1}
	b1 := &pb.CachePolicy{Name: "b", PathPrefix: "/b/"}
	r1 := put(a1, b1)
	if again := put(a1); again != r1 {
		t.Fatalf("applying a unchanged: revision %d, want %d (nothing written)", again, r1)
	}
	want1 := set()
	a2 := &pb.CachePolicy{Name: "a", PathPrefix: "/a/", MaxVariants: 2}
	r2 := put(a2)
	if _, err := admin.DeletePolicy(ctx, &pb.DeletePolicyRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	put(&pb.CachePolicy{Name: "c", PathPrefix: "/c/"})

	h, err := admin.PolicyHistory(ctx, &pb.PolicyHistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range h.GetEntries() {
		actions = append(actions, e.GetAction())
	}
	if len(h.GetEntries()) != 4 || h.GetEntries()[3].GetRevision() != r1 || h.GetEntries()[2].GetRevision() != r2 {
		t.Fatalf("history: %v (%d entries); want apply, apply, delete, apply, newest first, the unchanged apply not recorded", actions, len(h.GetEntries()))
	}
	change := h.GetEntries()[2].GetChanges()[0] // a1 -> a2
	if change.GetBefore().GetMaxVariants() != 1 || change.GetAfter().GetMaxVariants() != 2 {
		t.Fatalf("the change at %d: before %v after %v", r2, change.GetBefore(), change.GetAfter())
	}
	if del := h.GetEntries()[1].GetChanges()[0]; del.GetName() != "b" || del.GetBefore() == nil || del.GetAfter() != nil {
		t.Fatalf("the deletion: %v", del)
	}
	only, err := admin.PolicyHistory(ctx, &pb.PolicyHistoryRequest{Name: "b"})
	if err != nil || len(only.GetEntries()) != 2 {
		t.Fatalf("history of b: %v, %v; want its creation and deletion", only.GetEntries(), err)
	}

	rb, err := admin.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{Revision: r1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rb.GetChanges()) != 3 {
		t.Fatalf("rollback changes: %v; want a back, b again, c deleted", rb.GetChanges())
	}
	got := set()
	if len(got) != len(want1) || !proto.Equal(got["a"], want1["a"]) || !proto.Equal(got["b"], want1["b"]) {
		t.Fatalf("after the rollback to %d: %v, want %v", r1, got, want1)
	}

	// The bound: 5 changes now, 4 kept; r1 was the first and is forgotten.
	h, err = admin.PolicyHistory(ctx, &pb.PolicyHistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.GetEntries()) != 4 || h.GetMaxEntries() != 4 || h.GetEntries()[0].GetAction() != "rollback" || h.GetEntries()[0].GetRolledBackTo() != r1 {
		t.Fatalf("history after the rollback: %d entries (max %d), newest %v", len(h.GetEntries()), h.GetMaxEntries(), h.GetEntries()[0])
	}
	_, err = admin.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{Revision: r1})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("rollback to a forgotten revision: %v, want NotFound", err)
	}
	if _, err := admin.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{Revision: h.GetRevision() + 100}); status.Code(err) != codes.NotFound {
		t.Fatalf("rollback to a future revision: %v, want NotFound", err)
	}
}
