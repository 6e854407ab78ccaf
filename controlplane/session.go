package controlplane

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// helloTimeout bounds how long a new stream may stay silent before its hello.
const helloTimeout = 10 * time.Second

// validNodeID keeps node ids usable as etcd key segments, metric labels and
// DNS labels (a StatefulSet pod name fits).
var validNodeID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)

// nodeService implements NodeService: one Session stream per cache node.
type nodeService struct {
	pb.UnsafeNodeServiceServer

	state     *state
	hub       *hub
	policies  *policyHub
	purges    *purgeHub
	joinToken string
	leaseTTL  time.Duration
	replica   string
	stopping  <-chan struct{}
	log       *slog.Logger
	// ca issues peer-hop certificates once loaded; caWanted says whether it
	// is configured at all.
	ca       *atomic.Pointer[certAuthority]
	caWanted bool
	sessions prometheus.Gauge
}

var _ pb.NodeServiceServer = (*nodeService)(nil)

// Session registers the node as a member bound to a lease kept alive by this
// stream, sends it a snapshot and then every new epoch. A node that closes
// its side cleanly leaves at once (its lease is revoked); a node whose stream
// breaks stays a member until the lease expires, so a brief disconnect does
// not move keys.
func (n *nodeService) Session(stream pb.NodeService_SessionServer) error {
	ctx := stream.Context()
	hello, err := n.recvHello(stream)
	if err != nil {
		return err
	}
	m := proto.Clone(hello.GetMember()).(*pb.Member)
	m.State = pb.MemberState_MEMBER_STATE_ACTIVE
	m.JoinedAt = timestamppb.Now()
	log := n.log.With("node", m.GetId())

	lease, err := n.state.kv.Grant(ctx, int64(n.leaseTTL/time.Second))
	if err != nil {
		return status.Errorf(codes.Unavailable, "granting lease for %s: %v", m.GetId(), err)
	}
	if err := n.state.putMember(ctx, m, lease.ID); err != nil {
		return toStatus(err)
	}
	st := &pb.Node{Member: m, SessionReplica: n.replica, ServingEpoch: hello.GetLastEpoch(), PolicyRevision: hello.GetPolicyRevision(),
		PurgeRevision: hello.GetPurgeRevision()}
	if err := n.state.putStatus(ctx, st, lease.ID); err != nil {
		return toStatus(err)
	}
	kaCtx, stopKeepAlive := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeepAlive()
	ka, err := n.state.kv.KeepAlive(kaCtx, lease.ID)
	if err != nil {
		return status.Errorf(codes.Unavailable, "keeping lease of %s alive: %v", m.GetId(), err)
	}
	log.Info("node session started", "peer", m.GetPeerAddress(), "lease", fmt.Sprintf("%x", lease.ID))
	n.sessions.Inc()
	defer n.sessions.Dec()

	wakeEpoch, unsubscribeEpochs := n.hub.notify.subscribe()
	defer unsubscribeEpochs()
	wakePolicies, unsubscribePolicies := n.policies.notify.subscribe()
	defer unsubscribePolicies()
	wakePurges, unsubscribePurges := n.purges.notify.subscribe()
	defer unsubscribePurges()
	cur := n.hub.epoch()
	policies := n.policies.since(hello.GetPolicyRevision())
	// A node must not serve what it missed being purged: the snapshot
	// carries every purge after the revision it applied, so the purges
	// must be known before it is sent.
	purges, loaded := n.purges.since(hello.GetPurgeRevision())
	if !loaded {
		return status.Error(codes.Unavailable, "this control plane replica has not read the purges from etcd yet; retry")
	}
	snap := &pb.Snapshot{Epoch: cur, Member: m, Policies: policies, Purges: purges}
	if csr := hello.GetCsr(); len(csr) > 0 {
		snap.Certificate = n.certificate(csr, m.GetId())
	}
	if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}); err != nil {
		return err
	}
	sent := cur.GetEpoch()
	sentPurges := hello.GetPurgeRevision()
	if len(purges) > 0 {
		sentPurges = purges[len(purges)-1].GetRevision()
	}
	sentPolicies := hello.GetPolicyRevision()
	if policies != nil {
		sentPolicies = policies.GetRevision()
	}

	msgs := make(chan *pb.SessionRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()

	for {
		select {
		case <-ctx.Done():
			log.Info("node session ended; member stays until its lease expires", "err", ctx.Err())
			return nil
		case <-n.stopping:
			return status.Error(codes.Unavailable, "control plane replica is shutting down; reconnect to another")
		case _, ok := <-ka:
			if !ok {
				log.Warn("lease lost; ending session so the node registers again")
				return status.Errorf(codes.Unavailable, "lease of %s lost", m.GetId())
			}
		case <-wakePolicies:
			ps := n.policies.since(sentPolicies)
			if ps == nil {
				continue
			}
			if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Policies{Policies: ps}}); err != nil {
				return err
			}
			sentPolicies = ps.GetRevision()
		case <-wakePurges:
			ps, _ := n.purges.since(sentPurges)
			for _, p := range ps {
				if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Purge{Purge: p}}); err != nil {
					return err
				}
				sentPurges = p.GetRevision()
			}
		case <-wakeEpoch:
			e := n.hub.epoch()
			if e.GetEpoch() <= sent {
				continue
			}
			if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Epoch{Epoch: e}}); err != nil {
				return err
			}
			sent = e.GetEpoch()
		case req := <-msgs:
			switch msg := req.GetMsg().(type) {
			case *pb.SessionRequest_Load:
				st.Load = msg.Load
				st.ServingEpoch = msg.Load.GetEpoch()
				st.LastReportAt = timestamppb.Now()
			case *pb.SessionRequest_EpochRequest:
				// This replica's watch may lag the node's peers: read etcd.
				e, _, err := n.state.currentEpoch(ctx)
				if err != nil || e.GetEpoch() <= sent {
					continue
				}
				if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Epoch{Epoch: e}}); err != nil {
					return err
				}
				sent = e.GetEpoch()
				continue
			case *pb.SessionRequest_CertificateRequest:
				cert := n.certificate(msg.CertificateRequest.GetCsr(), m.GetId())
				if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Certificate{Certificate: cert}}); err != nil {
					return err
				}
				continue
			case *pb.SessionRequest_PurgeResult:
				r := msg.PurgeResult
				r.NodeId = m.GetId()
				if r.GetError() != "" {
					log.Warn("node failed to apply a purge", "purge", r.GetPurgeId(), "err", r.GetError())
				}
				st.PurgeRevision = max(st.GetPurgeRevision(), r.GetRevisionApplied())
				// The floor is no recorded purge: nobody waits for it.
				if !strings.HasPrefix(r.GetPurgeId(), floorPrefix) {
					if err := n.state.recordAck(ctx, r); err != nil {
						log.Warn("recording a purge result", "purge", r.GetPurgeId(), "err", err)
					}
				}
			case *pb.SessionRequest_PolicyAck:
				ack := msg.PolicyAck
				st.PolicyRevision = ack.GetAppliedRevision()
				if ack.GetRefusedRevision() != 0 {
					st.PolicyRefusedRevision, st.PolicyError = ack.GetRefusedRevision(), ack.GetError()
					log.Warn("node refused a policy push", "revision", ack.GetRefusedRevision(), "reason", ack.GetError())
				}
			default:
				continue
			}
			if err := n.state.putStatus(ctx, st, lease.ID); err != nil {
				log.Warn("recording node status", "err", err)
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				// The node said goodbye: leave the ring now rather than after the TTL.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_, rerr := n.state.kv.Revoke(rctx, lease.ID)
				cancel()
				log.Info("node left", "revoke_err", rerr)
				return nil
			}
			log.Info("node session broken; member stays until its lease expires", "err", err)
			return nil
		}
	}
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
	if n.joinToken != "" && subtle.ConstantTimeCompare([]byte(hello.GetJoinToken()), []byte(n.joinToken)) != 1 {
		return nil, status.Error(codes.Unauthenticated, "node session: missing or wrong join token")
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
		return fmt.Errorf("node id %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", m.GetId())
	}
	if _, _, err := net.SplitHostPort(m.GetPeerAddress()); err != nil {
		return fmt.Errorf("peer address %q of %s: %v", m.GetPeerAddress(), m.GetId(), err)
	}
	return nil
}
