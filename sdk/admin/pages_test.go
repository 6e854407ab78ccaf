package admin

import (
	"context"
	"fmt"
	"net"
	"strconv"
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

func servePaged(t *testing.T, srv *pagedNodes) *Client {
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
