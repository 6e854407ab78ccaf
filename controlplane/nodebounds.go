package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/redact"
)

// What one node may make the replica keep and do: a place in the ring,
// its reports and words as operators see them, its requests' cost.

// roomFor refuses a new id when the current epoch holds maxMembers
// members; an id of the epoch's is always taken again, and so is one that
// is a member out of the epoch: registered (its session broke within the
// lease TTL, or it has not reached an epoch yet) or drained, which an
// operator may undrain. Only a full ring costs that etcd read.
func (n *nodeService) roomFor(ctx context.Context, id string) error {
	e := n.hub.epoch()
	if e == nil || len(e.GetMembers()) < n.maxMembers {
		return nil
	}
	for _, m := range e.GetMembers() {
		if m.GetId() == id {
			return nil
		}
	}
	resp, err := n.state.kv.Txn(ctx).Then(
		clientv3.OpGet(n.state.memberKey(id), clientv3.WithCountOnly()),
		clientv3.OpGet(n.state.drainKey(id), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading the member record of %s: %v; reconnect", id, err)
	}
	for _, r := range resp.Responses {
		if r.GetResponseRange().GetCount() > 0 {
			return nil
		}
	}
	n.log.Warn("refused a node: the ring has its maximum of members", "node", id, "max", n.maxMembers)
	return sessionEnd(codes.ResourceExhausted, pb.SessionEnd_SESSION_END_RING_FULL,
		"the ring has its maximum of %d members (--max-members); %s is not one of them", n.maxMembers, id)
}

// A node's reports are kept per node (in this replica's memory and in
// etcd) and answered in ListNodes, a page of many nodes in one message:
// what a node says in them is bounded. Its routes are the node's few
// request routes (local, relayed, ...); its policy error one message.
const (
	maxLoadRoutes    = 32
	maxLoadRouteName = 64
	maxNodeError     = 1 << 10
)

// boundedRoutes reports whether a load report's routes are within
// maxLoadRoutes printable names of at most maxLoadRouteName bytes.
func boundedRoutes(routes map[string]uint64) bool {
	if len(routes) > maxLoadRoutes {
		return false
	}
	for name := range routes {
		if len(name) > maxLoadRouteName || redact.Printable(name) != name {
			return false
		}
	}
	return true
}

// cutText is s, a node's own words, as operators are shown it: what is
// not printable escaped (cachectl shows it on a terminal), cut to at most
// limit bytes (on a character boundary), saying how long it was.
func cutText(s string, limit int) string {
	s = redact.Printable(s)
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + fmt.Sprintf("... (%d bytes)", len(s))
}

// Bounds of a session's requests: a node renews its certificate two
// thirds into its life, asks for an epoch when a peer shows a newer one,
// and drains itself once; a node asking more only costs the replica.
// certsPerSecond is the least certificate rate: a session gets one a
// third of the certificate lifetime when that is more (certificate).
const (
	certsPerSecond      = 1.0 / 30
	certsBurst          = 3
	epochReadsPerSecond = 5
	epochReadsBurst     = 5
	drainsPerSecond     = 1
	drainsBurst         = 2
)

// allow takes a token of *l, made with per and burst at its first use.
func allow(l **rate.Limiter, per float64, burst int) bool {
	if *l == nil {
		*l = rate.NewLimiter(rate.Limit(per), burst)
	}
	return (*l).Allow()
}

// certificate signs csr for the session's member, within the session's
// bound: past it, the certificate last issued for the same CSR again, or
// an error saying when to ask.
func (r *sessionRun) certificate(csr []byte) *pb.Certificate {
	per := certsPerSecond
	if ca := r.n.ca.Load(); ca != nil && ca.ttl > 0 {
		// A node renews two thirds into the life left: with a short
		// --peer-cert-ttl it asks more often than the default bound,
		// and a certificate it is answered with again would run out.
		per = max(per, 3/ca.ttl.Seconds())
	}
	if r.certs != nil {
		r.certs.SetLimit(rate.Limit(per))
	}
	if !allow(&r.certs, per, certsBurst) {
		if r.lastCert != nil && bytes.Equal(csr, r.lastCSR) {
			return r.lastCert
		}
		return &pb.Certificate{Error: fmt.Sprintf("this session asked for %d certificates in a row; ask again in %s",
			certsBurst, time.Duration(float64(time.Second)/per).Round(time.Millisecond))}
	}
	cert := r.n.certificate(csr, r.m.GetId())
	if cert.GetError() == "" {
		r.lastCert, r.lastCSR = cert, csr
	}
	return cert
}
