package session

import (
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// maxRetryAfter bounds the wait a control plane's refusal may ask for.
const maxRetryAfter = 5 * time.Minute

// ended records what the status a session ended with says of the node's
// membership, and logs it; it reports whether the control plane refused
// the node (logged here), rather than being unreachable, and how long it
// asked the node to wait before trying again (zero: not said).
func (c *Client) ended(err error, addr string) (refused bool, retryAfter time.Duration) {
	st, ok := status.FromError(err)
	if !ok {
		return false, 0
	}
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		// Reachable, and saying no: a wrong or missing join token (or a
		// certificate it does not take) is not an outage.
		c.setMember(false, "join_refused", "refused by the control plane: "+st.Message())
		c.cfg.Logger.Error("the control plane refused this node's join: check --join-token-file (or SHARDCACHE_JOIN_TOKEN) against the control plane's; retrying",
			"control_plane", addr, "reason", st.Message())
		return true, 0
	}
	end := pb.SessionEnd_SESSION_END_UNSPECIFIED
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == pb.SessionEndDomain {
				end = pb.SessionEnd(pb.SessionEnd_value[d.GetReason()])
			}
		case *errdetails.RetryInfo:
			retryAfter = min(max(d.GetRetryDelay().AsDuration(), 0), maxRetryAfter)
		}
	}
	cause := strings.ToLower(strings.TrimPrefix(end.String(), "SESSION_END_"))
	switch end {
	// The state is recorded before it is logged: whoever reads the log
	// line finds /readyz saying the same.
	case pb.SessionEnd_SESSION_END_DUPLICATE_ID:
		c.setMember(false, cause, "refused by the control plane: "+st.Message())
		c.cfg.Logger.Error("the control plane refused this node: another process has an open session with the same id; retrying until it ends",
			"control_plane", addr, "id", c.cfg.Member.GetId(), "reason", st.Message())
		return true, 0
	case pb.SessionEnd_SESSION_END_RING_FULL:
		c.setMember(false, cause, "refused by the control plane: "+st.Message())
		c.cfg.Logger.Error("the control plane refused this node: the ring holds its maximum of members (the control plane's --max-members); retrying until one leaves",
			"control_plane", addr, "id", c.cfg.Member.GetId(), "reason", st.Message())
		return true, 0
	case pb.SessionEnd_SESSION_END_BUSY:
		// Not a change of membership: the node keeps serving with what
		// it has and says hello again when told.
		c.cfg.Logger.Warn("the control plane is registering as many nodes as it takes at once; retrying when it said",
			"control_plane", addr, "retry_in", retryAfter.Round(time.Millisecond), "epoch", c.Epoch())
		return true, retryAfter
	case pb.SessionEnd_SESSION_END_RECORD_DELETED, pb.SessionEnd_SESSION_END_RECORD_REPLACED, pb.SessionEnd_SESSION_END_LEASE_LOST:
		c.setMember(false, cause, "membership lost: "+st.Message()+"; registering again")
		c.cfg.Logger.Warn("membership lost; registering again", "control_plane", addr, "reason", st.Message())
		return true, 0
	}
	return false, 0
}
