package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/opsclient"
)

// serveHTTP serves h on a loopback port until the test ends.
func serveHTTP(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// warmNode answers POST /warm as a node's ops listener does (dataplane/ops):
// a warm grant for node id signed with the admin token, or 401 (and the
// test fails if the admin token itself is sent), a WarmRequest in protobuf JSON or 400, then one
// WarmProgress a line, flushed, the last with the summary. breakAfter > 0
// ends the answer after that many steps, without a summary.
func warmNode(t *testing.T, id string, breakAfter int) string {
	return serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/warm" {
			http.NotFound(w, r)
			return
		}
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token == testToken {
			t.Errorf("the control plane sent %s its admin token, not a warm grant", id)
		}
		if err := opsclient.CheckWarmGrant(testToken, id, token, time.Now()); err != nil {
			http.Error(w, "ops listener: "+err.Error(), http.StatusUnauthorized)
			return
		}
		b, _ := io.ReadAll(r.Body)
		req := &pb.WarmRequest{}
		if err := protojson.Unmarshal(b, req); err != nil || len(req.GetImages()) == 0 {
			http.Error(w, fmt.Sprintf("warm: invalid request: %d images: name 1 to 64", len(req.GetImages())), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		line := func(p *pb.WarmProgress) {
			b, _ := protojson.Marshal(p)
			w.Write(append(b, '\n'))
			w.(http.Flusher).Flush()
		}
		line(&pb.WarmProgress{Image: req.GetImages()[0], Kind: "manifest", Digest: "sha256:m", Result: "filled"})
		for i := range uint32(3) {
			if breakAfter > 0 && int(i)+1 >= breakAfter {
				return // the node went away mid-warm
			}
			line(&pb.WarmProgress{Image: req.GetImages()[0], Kind: "blob", Digest: fmt.Sprintf("sha256:b%d", i), Bytes: 10, Result: "filled",
				Done: i + 1, Total: 3})
		}
		line(&pb.WarmProgress{Summary: &pb.WarmSummary{Images: 1, Manifests: 1, Blobs: 3, Filled: 4, Bytes: 30, Node: id}})
	})
}

// TestWarmThroughANode: the RPC is an admin call; it has the named node,
// or the first active one with an ops URL, warm at its ops listener with
// the control plane's admin token, and streams every step back in order,
// the summary last. A node that is unknown, down, refuses, or breaks off
// ends the call with a status naming it.
func TestWarmThroughANode(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	adm := pb.NewAdminServiceClient(conn)
	down := freeURL(t) // nothing listens there
	for _, n := range []struct{ id, ops string }{
		{"n0-no-ops", ""},
		{"n1-warms", warmNode(t, "n1-warms", 0)},
		{"n2-down", down},
		{"n3-refuses", serveHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "ops listener: the token does not match", http.StatusUnauthorized) // another admin token
		})},
		{"n4-breaks", warmNode(t, "n4-breaks", 2)},
	} {
		openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: n.id, PeerAddress: "127.0.0.1:9999", PublicUrl: "http://" + n.id, OpsUrl: n.ops}})
	}
	// warm calls the RPC and returns what it streamed before it ended.
	warm := func(token string, req *pb.WarmRequest) ([]*pb.WarmProgress, error) {
		ctx := context.Background()
		if token != "" {
			ctx = adminCtx(ctx, token)
		}
		stream, err := adm.Warm(ctx, req)
		if err != nil {
			return nil, err
		}
		var got []*pb.WarmProgress
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			got = append(got, m.GetProgress())
		}
	}
	images := []string{"reg.test/team/app:v1"}

	t.Run("streams in order, summary last", func(t *testing.T) {
		for _, node := range []string{"", "n1-warms"} { // the first active node with an ops URL, or named
			got, err := warm(testToken, &pb.WarmRequest{Images: images, Node: node})
			if err != nil {
				t.Fatalf("node %q: %v", node, err)
			}
			var seq []string
			for _, p := range got {
				seq = append(seq, p.GetKind()+p.GetDigest())
			}
			if want := "manifestsha256:m blobsha256:b0 blobsha256:b1 blobsha256:b2"; len(got) != 5 || strings.Join(seq[:4], " ") != want ||
				got[4].GetSummary().GetNode() != "n1-warms" || got[4].GetSummary().GetFilled() != 4 {
				t.Fatalf("node %q streamed %v, want %s then the summary of n1-warms", node, got, want)
			}
		}
	})
	for _, tc := range []struct {
		name, token string
		req         *pb.WarmRequest
		code        codes.Code
		says        string // the status's message names it
		steps       int    // streamed before the status
	}{
		{"no token", "", &pb.WarmRequest{Images: images}, codes.Unauthenticated, "", 0},
		{"wrong token", "not-the-token", &pb.WarmRequest{Images: images}, codes.Unauthenticated, "invalid admin token", 0},
		{"unknown node", testToken, &pb.WarmRequest{Images: images, Node: "n9"}, codes.NotFound, `"n9" is not registered`, 0},
		{"node without ops URL", testToken, &pb.WarmRequest{Images: images, Node: "n0-no-ops"}, codes.InvalidArgument, "n0-no-ops", 0},
		{"node down", testToken, &pb.WarmRequest{Images: images, Node: "n2-down"}, codes.Unavailable, "n2-down unreachable at " + down, 0},
		{"node refuses the token", testToken, &pb.WarmRequest{Images: images, Node: "n3-refuses"}, codes.PermissionDenied, "n3-refuses refused /warm", 0},
		{"node refuses the request", testToken, &pb.WarmRequest{Node: "n1-warms"}, codes.InvalidArgument, "n1-warms /warm: warm: invalid request", 0},
		{"node breaks off", testToken, &pb.WarmRequest{Images: images, Node: "n4-breaks"}, codes.Unavailable, "n4-breaks /warm: the answer ended without its summary", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := warm(tc.token, tc.req)
			t.Log(err)
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.says) || len(got) != tc.steps {
				t.Fatalf("%v after %d steps, want %s saying %q after %d", err, len(got), tc.code, tc.says, tc.steps)
			}
			// A node's failure, not the control plane's, says so.
			nodeSaid := false
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == pb.NodeUnavailableReason {
					nodeSaid = info.GetMetadata()["node"] == tc.req.GetNode()
				}
			}
			if want := tc.code == codes.Unavailable; nodeSaid != want {
				t.Errorf("ErrorInfo %s naming %s: %v, want %v", pb.NodeUnavailableReason, tc.req.GetNode(), nodeSaid, want)
			}
		})
	}
}
