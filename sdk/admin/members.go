package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Every node holds the ring it serves with, so any node can say who the
// members are and where their ops listeners are: the tools that read the
// nodes directly (stats, top, log, inspect, version) keep working while
// the control plane is down.

// Members is a node's answer to /members: itself and the ring epoch it
// serves with.
type Members struct {
	// Node is the answering node's id, Version its build.
	Node    string `json:"node"`
	Version string `json:"version"`
	// OpsURL is the answering node's advertised ops URL.
	OpsURL string `json:"ops_url"`
	// Epoch is the node's ring epoch in protojson (null before it has one).
	Epoch json.RawMessage `json:"epoch"`
}

// ErrNoNodeAnswered: none of the ops addresses given answered /members.
var ErrNoNodeAnswered = errors.New("shardcache: no node answered")

// NodesFrom learns the cluster's nodes from the first of opsAddrs (ops
// listeners, host:port or a URL) that answers, without the control plane:
// the members of the ring that node serves with, and the node itself
// (a drained node is out of the ring but still serving). The node asked is
// reached at the address given; the others at their advertised ops URLs.
// The answer has no load reports or session figures: only the control
// plane has those.
func (c *Client) NodesFrom(ctx context.Context, opsAddrs []string) (*pb.ListNodesResponse, error) {
	var errs []error
	for _, a := range opsAddrs {
		base, err := opsBase(a)
		if err != nil {
			return nil, err
		}
		// The address is the caller's own, not one a member advertised;
		// and the node's id, which a grant names, is not known yet.
		asked := &pb.Node{Member: &pb.Member{Id: a, OpsUrl: base}}
		b, err := c.opsRead(ctx, asked, "/members", c.cfg.Token)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := nodesOf(b, base)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s /members: %w", a, err))
			continue
		}
		return resp, nil
	}
	return nil, fmt.Errorf("%w of %s: %w", ErrNoNodeAnswered, strings.Join(opsAddrs, ", "), errors.Join(errs...))
}

// opsBase turns "host:port" or a URL into an ops base URL.
func opsBase(a string) (string, error) {
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	u, err := url.Parse(a)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: node address %q: want host:port of its ops listener, or an http(s) URL", ErrInvalid, a)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// nodesOf reads a /members answer; the answering node is reached at base.
func nodesOf(b []byte, base string) (*pb.ListNodesResponse, error) {
	var m Members
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	ep := &pb.RingEpoch{}
	if len(m.Epoch) > 0 && string(m.Epoch) != "null" {
		if err := protojson.Unmarshal(m.Epoch, ep); err != nil {
			return nil, err
		}
	}
	resp := &pb.ListNodesResponse{Epoch: ep.GetEpoch()}
	self := false
	for _, mem := range ep.GetMembers() {
		n := &pb.Node{Member: mem, InRing: true, ServingEpoch: ep.GetEpoch()}
		if mem.GetId() == m.Node {
			self = true
			mem.OpsUrl, mem.Version = base, m.Version
		}
		resp.Nodes = append(resp.Nodes, n)
	}
	if !self && m.Node != "" {
		// Out of its own ring (drained, or not admitted): still asked.
		resp.Nodes = append(resp.Nodes, &pb.Node{Member: &pb.Member{Id: m.Node, OpsUrl: base, Version: m.Version}})
		slices.SortFunc(resp.Nodes, func(x, y *pb.Node) int { return strings.Compare(x.GetMember().GetId(), y.GetMember().GetId()) })
	}
	return resp, nil
}

// NodeVersion asks n's ops listener which version it runs.
func (c *Client) NodeVersion(ctx context.Context, n *pb.Node) (string, error) {
	b, err := c.opsGet(ctx, n, "/members")
	if err != nil {
		return "", err
	}
	var m Members
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("%s /members: %w", n.GetMember().GetId(), err)
	}
	return m.Version, nil
}
