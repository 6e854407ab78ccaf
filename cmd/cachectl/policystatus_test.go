package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// pagedPolicyStatus answers PolicyStatus a page of at most size nodes at a
// time, its token the index of the next node; node i runs revision i%3+1
// and the current one is 3.
type pagedPolicyStatus struct {
	pb.UnimplementedAdminServiceServer
	ids  []string
	size int
}

func (p *pagedPolicyStatus) PolicyStatus(_ context.Context, req *pb.PolicyStatusRequest) (*pb.PolicyStatusResponse, error) {
	from, _ := strconv.Atoi(req.GetPageToken())
	to := min(from+p.size, len(p.ids))
	resp := &pb.PolicyStatusResponse{Revision: 3}
	for i := from; i < to; i++ {
		resp.Nodes = append(resp.Nodes, &pb.NodePolicyStatus{NodeId: p.ids[i], AppliedRevision: int64(i%3 + 1)})
	}
	if to < len(p.ids) {
		resp.NextPageToken = strconv.Itoa(to)
	}
	return resp, nil
}

// The control plane answers PolicyStatus a page at a time: cachectl policy
// status still shows every node, as a table and as JSON.
func TestPolicyStatusShowsEveryPage(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &pagedPolicyStatus{size: 3}
	for i := range 8 {
		srv.ids = append(srv.ids, fmt.Sprintf("node-%d", i))
	}
	gs := grpc.NewServer()
	pb.RegisterAdminServiceServer(gs, srv)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	run := func(args ...string) string {
		t.Helper()
		root := newRootCommand()
		root.SilenceUsage, root.SilenceErrors = true, true
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append([]string{"--control-plane", l.Addr().String(), "--token", "t", "--timeout", "5s"}, args...))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("cachectl %s: %v", strings.Join(args, " "), err)
		}
		return out.String()
	}

	table := run("policy", "status")
	var rows []string
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "node-") {
			rows = append(rows, strings.Join(f[:3], " "))
		}
	}
	var want []string
	for i, id := range srv.ids {
		want = append(want, fmt.Sprintf("%s %d %t", id, i%3+1, i%3+1 == 3))
	}
	if !strings.HasPrefix(table, "CURRENT REVISION 3\n") || strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Fatalf("policy status over pages of 3:\n%s\nwant the rows\n%s", table, strings.Join(want, "\n"))
	}

	var st struct {
		Revision int64 `json:"revision"`
		Nodes    []struct {
			NodeID string `json:"node_id"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(run("policy", "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range st.Nodes {
		ids = append(ids, n.NodeID)
	}
	if st.Revision != 3 || strings.Join(ids, " ") != strings.Join(srv.ids, " ") {
		t.Fatalf("policy status -o json over pages of 3: revision %d, nodes %v; want 3 and %v", st.Revision, ids, srv.ids)
	}
}
