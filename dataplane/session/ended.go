package session

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// ended records what the status a session ended with says of the node's
// membership, and logs it; it reports whether the control plane refused
// the node (logged here), rather than being unreachable.
func (c *Client) ended(err error, addr string) (refused bool) {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		// Reachable, and saying no: a wrong or missing join token (or a
		// certificate it does not take) is not an outage.
		c.setMember(false, "join_refused", "refused by the control plane: "+st.Message())
		c.cfg.Logger.Error("the control plane refused this node's join: check --join-token-file (or SHARDCACHE_JOIN_TOKEN) against the control plane's; retrying",
			"control_plane", addr, "reason", st.Message())
		return true
	}
	end := pb.SessionEnd_SESSION_END_UNSPECIFIED
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == pb.SessionEndDomain {
			end = pb.SessionEnd(pb.SessionEnd_value[info.GetReason()])
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
		return true
	case pb.SessionEnd_SESSION_END_RECORD_DELETED, pb.SessionEnd_SESSION_END_RECORD_REPLACED, pb.SessionEnd_SESSION_END_LEASE_LOST:
		c.setMember(false, cause, "membership lost: "+st.Message()+"; registering again")
		c.cfg.Logger.Warn("membership lost; registering again", "control_plane", addr, "reason", st.Message())
		return true
	}
	return false
}
