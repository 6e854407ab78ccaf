package session

import (
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// RequestDrain asks the control plane to drain this node (DrainRequest):
// out of the ring from the next epoch, until the process leaves or an
// operator undrains it. It is sent on the current session, if one is
// established (Connected); the control plane keeps the drain across the
// process's reconnects.
func (c *Client) RequestDrain() {
	select {
	case c.drainReq <- struct{}{}:
	default: // one is pending already
	}
}

// sendDrain sends the drain request on an established session.
func (c *Client) sendDrain(stream stream, established bool) error {
	if !established {
		return nil
	}
	return stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_DrainRequest{DrainRequest: &pb.DrainRequest{}}})
}
