package admin

import (
	"context"
	"errors"
	"io"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// ErrWarmIncomplete: a warm's stream ended without its summary (the
// control plane stopped, or the connection broke).
var ErrWarmIncomplete = errors.New("shardcache: the warm ended without a summary")

// Warm preheats req's images into the mirror policy's cache through the
// control plane (AdminService.Warm): one node, req.Node or else the first
// active one, resolves each reference and has every manifest and blob
// filled by its owner. progress, when set, gets each step as it ends, in
// the order the node sends them. It returns the summary.
//
// A warm lasts as long as its transfers: Config.Timeout does not bound it,
// ctx does. It is not retried (warming again is harmless: what is stored
// is reported cached). A node that cannot be reached or breaks off is
// ErrNodeUnavailable, a node that refuses the control plane's token
// ErrUnauthenticated, an unknown node ErrNotFound, each naming the node.
func (c *Client) Warm(ctx context.Context, req *pb.WarmRequest, progress func(*pb.WarmProgress)) (*pb.WarmSummary, error) {
	// Returning before the stream's end must release it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Warm(ctx, req)
	if err != nil {
		return nil, fromStatus(err)
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, ErrWarmIncomplete
		}
		if err != nil {
			return nil, fromStatus(err)
		}
		p := m.GetProgress()
		if p.GetSummary() != nil {
			return p.GetSummary(), nil
		}
		if progress != nil {
			progress(p)
		}
	}
}
