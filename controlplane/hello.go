package controlplane

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"regexp"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/authlimit"
)

// helloTimeout bounds how long a new stream may stay silent before its hello.
const helloTimeout = 10 * time.Second

// validNodeID keeps node ids usable as etcd key segments, metric labels and
// DNS names (a StatefulSet pod name fits): lower case, as a DNS name
// compares without case, ending in a letter or digit, as one compares
// without its trailing dot. An id is the name a member's peer
// certificate is issued for: "N1" beside "n1", or "CONTROL.TEST" beside
// the control plane's control.test, would verify as the other.
var validNodeID = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// refuse answers a hello for an id whose session another process holds,
// and records the attempt for ListNodes.
func (n *nodeService) refuse(ctx context.Context, m *pb.Member, held error) error {
	n.refused.Inc()
	var remote string
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr.String()
	}
	reason := held.Error()
	n.log.Warn("refused a session: the node id has an open session from another process", "node", m.GetId(),
		"peer", m.GetPeerAddress(), "remote", remote, "reason", reason)
	rctx, cancel := cleanupContext(ctx)
	defer cancel()
	r := &pb.RefusedSession{PeerAddress: m.GetPeerAddress(), RemoteAddress: remote, At: timestamppb.Now(), Reason: reason, Replica: n.replica}
	if err := n.state.recordRefusal(rctx, m.GetId(), r); err != nil {
		n.log.Warn("recording a refused session", "node", m.GetId(), "err", err)
	}
	return sessionEnd(codes.AlreadyExists, pb.SessionEnd_SESSION_END_DUPLICATE_ID,
		"node id %s: %v; is a second process running with this id? it is admitted once that session ends", m.GetId(), held)
}

// sessionEnd is a status that says why a session was refused or ended, with
// the reason in a google.rpc.ErrorInfo the node reads.
func sessionEnd(code codes.Code, end pb.SessionEnd, format string, args ...any) error {
	return sessionEndStatus(code, end, fmt.Sprintf(format, args...)).Err()
}

// sessionEndStatus is sessionEnd's status, for a caller that adds details.
func sessionEndStatus(code codes.Code, end pb.SessionEnd, msg string) *status.Status {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: end.String(), Domain: pb.SessionEndDomain}); err == nil {
		st = d
	}
	return st
}

// recvHello reads and checks the first message of a session.
func (n *nodeService) recvHello(stream pb.NodeService_SessionServer) (*pb.Hello, error) {
	type result struct {
		req *pb.SessionRequest
		err error
	}
	ch := make(chan result, 1)
	go func() {
		req, err := stream.Recv()
		ch <- result{req, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-time.After(helloTimeout):
		return nil, status.Errorf(codes.DeadlineExceeded, "no hello within %s", helloTimeout)
	}
	if r.err != nil {
		return nil, r.err
	}
	hello := r.req.GetHello()
	if hello == nil {
		return nil, status.Error(codes.InvalidArgument, "the first session message must be a hello")
	}
	if n.joinToken != "" {
		err := n.checkJoin(stream.Context(), func() bool {
			return subtle.ConstantTimeCompare([]byte(hello.GetJoinToken()), []byte(n.joinToken)) == 1
		})
		if errors.Is(err, authlimit.ErrWrong) {
			return nil, status.Error(codes.Unauthenticated, "node session: missing or wrong join token")
		}
		if err != nil {
			return nil, err
		}
	}
	if err := validateMember(hello.GetMember()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return hello, nil
}

func validateMember(m *pb.Member) error {
	if m == nil {
		return errors.New("hello carries no member")
	}
	if !validNodeID.MatchString(m.GetId()) {
		return fmt.Errorf("node id %q: use 1 to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit", m.GetId())
	}
	// Every member is in every ring epoch pushed to every node, in
	// ListNodes and in etcd: a field is bounded, so one registration cannot
	// outgrow the messages that carry the ring.
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"peer address", m.GetPeerAddress(), maxMemberAddress},
		{"public URL", m.GetPublicUrl(), maxMemberURL},
		{"ops URL", m.GetOpsUrl(), maxMemberURL},
		{"zone", m.GetZone(), maxMemberLabel},
		{"version", m.GetVersion(), maxMemberLabel},
		{"peer hop", m.GetPeerHop(), maxMemberLabel},
	} {
		if len(f.v) > f.max {
			return fmt.Errorf("%s of %s: %s, longer than %d bytes", f.name, m.GetId(), quoteCut(f.v), f.max)
		}
		// Shown by cachectl on operators' terminals, in logs and in
		// labels: a control character (an escape sequence) is refused.
		for i := 0; i < len(f.v); i++ {
			if c := f.v[i]; c < ' ' || c > '~' {
				return fmt.Errorf("%s of %s: %s holds byte %#02x at %d; want printable ASCII", f.name, m.GetId(), quoteCut(f.v), c, i)
			}
		}
	}
	// Fields of a newer version pass through (into the member and status
	// records, and ListNodes), a few of them.
	if u := len(m.ProtoReflect().GetUnknown()); u > maxUnknownFields {
		return fmt.Errorf("member %s carries %d bytes of fields this control plane does not know, more than %d", m.GetId(), u, maxUnknownFields)
	}
	if _, _, err := net.SplitHostPort(m.GetPeerAddress()); err != nil {
		return fmt.Errorf("peer address %q of %s: %v", m.GetPeerAddress(), m.GetId(), err)
	}
	return nil
}

// Bounds of a member's fields: a host name and port; a base URL; a zone,
// a version or a peer-hop kind.
const (
	maxMemberAddress = 512
	maxMemberURL     = 2 << 10
	maxMemberLabel   = 256
)

// maxUnknownFields bounds the bytes of fields this control plane does not
// know that a node's member, load report or purge result may carry: they
// are kept and answered as they came, so a newer node's few new fields
// reach the admin calls, but no more.
const maxUnknownFields = 1 << 10

// dropUnknownPast drops m's unknown fields when they are more than
// maxUnknownFields bytes, reporting whether it did.
func dropUnknownPast(m proto.Message) bool {
	r := m.ProtoReflect()
	if len(r.GetUnknown()) <= maxUnknownFields {
		return false
	}
	r.SetUnknown(nil)
	return true
}
