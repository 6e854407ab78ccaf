package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/policy"
	"github.com/shardcache/shardcache/sdk/ring"
)

// location is where the current ring places a URL.
type location struct {
	URL    string `json:"url"`
	Key    string `json:"key"`
	Policy string `json:"policy"`
	Mode   string `json:"mode"`
	// Bypass is set when the policy's mode or one of its bypass rules
	// sends a plain GET of the URL to the origin.
	Bypass bool   `json:"bypass"`
	Epoch  uint64 `json:"epoch"`
	// Owner is nil when no node owns the key: bypassed, or cached by every
	// node itself (mode local).
	Owner *locatedNode `json:"owner"`
	// HotReplicas are the further owners the key gets while it is hot.
	HotReplicas []locatedNode `json:"hot_replicas"`
}

// locatedNode is a ring member as locate shows it.
type locatedNode struct {
	ID          string `json:"id"`
	PeerAddress string `json:"peer_address"`
	PublicURL   string `json:"public_url"`
}

func newLocateCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "locate URL",
		Short: "Show the cache key of a URL and the nodes that own it in the current ring",
		Long: `Show the cache key of a URL and the nodes that own it in the current ring: the
policy the URL falls under, its mode, the owner and, for a hot key, the replicas that
also serve it. The key is built as nodes build it for a plain GET: their client
listener speaks HTTP, so $scheme is http, and headers or cookies the key template
uses count as absent.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := parseURL(args[0])
			if err != nil {
				return err
			}
			return g.withClient(func(c *admin.Client) error {
				e, err := c.GetRing(cmd.Context(), 0)
				if err != nil {
					return err
				}
				ps, err := c.ListPolicies(cmd.Context())
				if err != nil {
					return err
				}
				loc, err := locate(u, e, ps)
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), g.output, loc, func(tw *tabwriter.Writer) { locationTable(tw, loc) })
			})
		},
	}
}

// locate places u in epoch e under the policies ps, with the policy
// matching and ring placement the nodes run.
func locate(u *url.URL, e *pb.RingEpoch, ps *pb.ListPoliciesResponse) (*location, error) {
	set, err := policy.Empty.Apply(&pb.PolicySet{Policies: ps.GetPolicies(), Revision: ps.GetRevision()})
	if err != nil {
		return nil, fmt.Errorf("policies of revision %d: %w", ps.GetRevision(), err)
	}
	r := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{}}
	p := set.Match(policy.Host(r), r.URL.Path)
	loc := &location{
		URL: u.String(), Key: p.Key("http", r), Policy: p.Name, Mode: modeName(p.Mode),
		Bypass: p.Mode == pb.CacheMode_CACHE_MODE_BYPASS || p.Bypass(r), Epoch: e.GetEpoch(),
		HotReplicas: []locatedNode{},
	}
	if loc.Bypass || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		return loc, nil
	}
	members := make([]ring.Member, 0, len(e.GetMembers()))
	byID := make(map[string]*pb.Member, len(e.GetMembers()))
	for _, m := range e.GetMembers() {
		members = append(members, ring.Member{ID: m.GetId(), Weight: m.GetWeight()})
		byID[m.GetId()] = m
	}
	rg, err := ring.New(e.GetEpoch(), members)
	if err != nil {
		return nil, fmt.Errorf("epoch %d: %w", e.GetEpoch(), err)
	}
	for i, o := range rg.Owners(loc.Key, max(p.ReplicationFactor, 1)) {
		m := byID[o.ID]
		n := locatedNode{ID: m.GetId(), PeerAddress: m.GetPeerAddress(), PublicURL: m.GetPublicUrl()}
		if i == 0 {
			loc.Owner = &n
		} else {
			loc.HotReplicas = append(loc.HotReplicas, n)
		}
	}
	return loc, nil
}

func locationTable(tw *tabwriter.Writer, loc *location) {
	fmt.Fprintf(tw, "url\t%s\n", loc.URL)
	fmt.Fprintf(tw, "key\t%s\n", loc.Key)
	fmt.Fprintf(tw, "policy\t%s (mode %s)\n", loc.Policy, loc.Mode)
	fmt.Fprintf(tw, "epoch\t%d\n", loc.Epoch)
	switch {
	case loc.Bypass:
		fmt.Fprintln(tw, "owner\tnone: bypassed, the origin answers")
	case loc.Owner == nil:
		fmt.Fprintln(tw, "owner\tnone: every node caches it itself")
	default:
		fmt.Fprintf(tw, "owner\t%s\n", nodeAddresses(*loc.Owner))
		hot := make([]string, len(loc.HotReplicas))
		for i, n := range loc.HotReplicas {
			hot[i] = nodeAddresses(n)
		}
		fmt.Fprintf(tw, "hot replicas\t%s\n", dash(strings.Join(hot, "; ")))
	}
}

// nodeAddresses is "node-1 (peer 10.0.0.1:9080, public http://10.0.0.1:8080)".
func nodeAddresses(n locatedNode) string {
	return fmt.Sprintf("%s (peer %s, public %s)", n.ID, dash(n.PeerAddress), dash(n.PublicURL))
}
