package admin

import (
	"context"
	"errors"
	"fmt"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/opsclient"
)

// ErrWarmIncomplete: a warm's answer ended without its summary (the node
// stopped, or the connection broke).
var ErrWarmIncomplete = errors.New("shardcache: the warm ended without a summary")

// Warm has node n preheat req's images into its mirror policy's cache (POST
// /warm at its ops listener, with the admin token): every manifest and
// blob is filled by its owner. progress, when set, gets each step as it
// ends. It returns the summary.
func (c *Client) Warm(ctx context.Context, n *pb.Node, req *pb.WarmRequest, progress func(*pb.WarmProgress)) (*pb.WarmSummary, error) {
	sum, err := opsclient.Client{Token: c.cfg.Token}.Warm(ctx, n.GetMember(), req, func(p *pb.WarmProgress) error {
		if progress != nil {
			progress(p)
		}
		return nil
	})
	switch {
	case errors.Is(err, opsclient.ErrRefused):
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	case errors.Is(err, opsclient.ErrInvalid):
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, opsclient.ErrBroken):
		return nil, fmt.Errorf("%w: %w", ErrWarmIncomplete, err)
	}
	return sum, err
}
