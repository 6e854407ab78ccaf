package admin

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// pagedNodes answers ListNodes a page of at most size of ids at a time,
// its token the index of the next node; stuck answers every page with the
// same token.
type pagedNodes struct {
	pb.UnimplementedAdminServiceServer
	ids   []string
	size  int
	stuck bool
}

func (p *pagedNodes) ListNodes(_ context.Context, req *pb.ListNodesRequest) (*pb.ListNodesResponse, error) {
	from, _ := strconv.Atoi(req.GetPageToken())
	to := min(from+p.size, len(p.ids))
	resp := &pb.ListNodesResponse{Epoch: 7}
	for _, id := range p.ids[from:to] {
		resp.Nodes = append(resp.Nodes, &pb.Node{Member: &pb.Member{Id: id}})
	}
	if p.stuck {
		resp.NextPageToken = "0"
	} else if to < len(p.ids) {
		resp.NextPageToken = strconv.Itoa(to)
	}
	return resp, nil
}

// pagedPolicyStatus answers PolicyStatus as pagedNodes answers ListNodes;
// the i-th page it answers carries revs[i], or the last of revs past them.
type pagedPolicyStatus struct {
	pb.UnimplementedAdminServiceServer
	ids   []string
	size  int
	stuck bool
	revs  []int64
	calls atomic.Int32
}

func (p *pagedPolicyStatus) PolicyStatus(_ context.Context, req *pb.PolicyStatusRequest) (*pb.PolicyStatusResponse, error) {
	from, _ := strconv.Atoi(req.GetPageToken())
	to := min(from+p.size, len(p.ids))
	call := int(p.calls.Add(1)) - 1
	resp := &pb.PolicyStatusResponse{Revision: p.revs[min(call, len(p.revs)-1)]}
	for _, id := range p.ids[from:to] {
		resp.Nodes = append(resp.Nodes, &pb.NodePolicyStatus{NodeId: id, AppliedRevision: resp.Revision})
	}
	if p.stuck {
		resp.NextPageToken = "0"
	} else if to < len(p.ids) {
		resp.NextPageToken = strconv.Itoa(to)
	}
	return resp, nil
}

func servePaged(t *testing.T, srv pb.AdminServiceServer) *Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterAdminServiceServer(gs, srv)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	c, err := New(Config{Address: l.Addr().String(), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The control plane answers ListNodes a page at a time: the client's
// ListNodes (what cachectl lists nodes with) follows the pages to the last
// and returns every node; a server that repeats a page token gets an error,
// not a loop.
func TestListNodesFollowsEveryPage(t *testing.T) {
	var ids []string
	for i := range 7 {
		ids = append(ids, fmt.Sprintf("node-%d", i))
	}
	c := servePaged(t, &pagedNodes{ids: ids, size: 3})
	resp, err := c.ListNodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range resp.GetNodes() {
		got = append(got, n.GetMember().GetId())
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) || resp.GetEpoch() != 7 || resp.GetNextPageToken() != "" {
		t.Fatalf("ListNodes over pages of 3: %v (epoch %d, token %q), want %v (epoch 7, no token)", got, resp.GetEpoch(), resp.GetNextPageToken(), ids)
	}

	stuck := servePaged(t, &pagedNodes{ids: ids, size: 3, stuck: true})
	if _, err := stuck.ListNodes(context.Background()); err == nil {
		t.Fatal("ListNodes from a server repeating its page token: no error")
	}
}

// The control plane answers PolicyStatus a page at a time: the client's
// PolicyStatus (what cachectl policy status shows) follows the pages to the
// last and returns every node with one revision of the policy set. Should
// the revision change between pages it reads them again from the first; a
// set that keeps changing, or a server that repeats a page token, gets an
// error, not a loop.
func TestPolicyStatusFollowsEveryPage(t *testing.T) {
	var ids []string
	for i := range 7 {
		ids = append(ids, fmt.Sprintf("node-%d", i))
	}
	check := func(name string, srv *pagedPolicyStatus, rev int64, calls int) {
		t.Helper()
		resp, err := servePaged(t, srv).PolicyStatus(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, n := range resp.GetNodes() {
			got = append(got, n.GetNodeId())
			if n.GetAppliedRevision() != rev {
				t.Errorf("%s: node %s from a page of revision %d, want all of revision %d", name, n.GetNodeId(), n.GetAppliedRevision(), rev)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(ids) || resp.GetRevision() != rev || resp.GetNextPageToken() != "" || int(srv.calls.Load()) != calls {
			t.Fatalf("%s: %v (revision %d, token %q) in %d calls, want %v (revision %d, no token) in %d",
				name, got, resp.GetRevision(), resp.GetNextPageToken(), srv.calls.Load(), ids, rev, calls)
		}
	}
	check("pages of 3", &pagedPolicyStatus{ids: ids, size: 3, revs: []int64{5}}, 5, 3)
	// The set changes after the first page: the three pages are read again.
	check("a change between pages", &pagedPolicyStatus{ids: ids, size: 3, revs: []int64{5, 6}}, 6, 5)

	churn := &pagedPolicyStatus{ids: ids, size: 3, revs: []int64{1, 2, 3, 4, 5, 6, 7, 8}}
	if _, err := servePaged(t, churn).PolicyStatus(context.Background()); err == nil || churn.calls.Load() != 2*policyStatusReads {
		t.Fatalf("PolicyStatus while the set changes at every page: %v after %d calls, want an error after %d", err, churn.calls.Load(), 2*policyStatusReads)
	}
	stuck := &pagedPolicyStatus{ids: ids, size: 3, stuck: true, revs: []int64{5}}
	if _, err := servePaged(t, stuck).PolicyStatus(context.Background()); err == nil {
		t.Fatal("PolicyStatus from a server repeating its page token: no error")
	}
}
