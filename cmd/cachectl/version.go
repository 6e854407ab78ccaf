package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/buildinfo"
)

// versions is what `cachectl version` prints.
type versions struct {
	Client build `json:"client"`
	// ControlPlane is nil when the control plane did not answer (or was
	// not asked: with --nodes).
	ControlPlane *build `json:"control_plane"`
	// Nodes are the versions the nodes reported in their hello (or, with
	// --nodes, their ring), by id.
	Nodes []nodeVersion `json:"nodes"`
}

// build describes one program's build; Replica is set for the control
// plane only.
type build struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Replica   string `json:"replica_id,omitempty"`
}

// nodeVersion is a node's version; empty when it reported none (an older
// node).
type nodeVersion struct {
	Node        string `json:"node"`
	Version     string `json:"version"`
	Unreachable string `json:"unreachable,omitempty"`
}

func newVersionCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the versions of cachectl, of the control plane and of every node",
		Long: `Show the versions of cachectl, of the control-plane replica that answers, and of every
node (as each said in its hello). With --nodes the nodes are asked instead and the control
plane is not: the versions are then those of the ring the first node that answers holds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(g.output); err != nil {
				return err
			}
			bi := buildinfo.Read()
			v := &versions{Client: build{Version: bi.Version, GoVersion: bi.GoVersion}, Nodes: []nodeVersion{}}
			err := g.withClient(func(c *admin.Client) error {
				if len(g.nodes) == 0 {
					cp, err := c.Version(cmd.Context())
					if err != nil {
						return fmt.Errorf("control plane version: %w", err)
					}
					v.ControlPlane = &build{Version: cp.GetVersion(), GoVersion: cp.GetGoVersion(), Replica: cp.GetReplicaId()}
				}
				resp, err := g.listNodes(cmd.Context(), c)
				if err != nil {
					return fmt.Errorf("node versions: %w", err)
				}
				if len(g.nodes) == 0 {
					for _, n := range resp.GetNodes() {
						v.Nodes = append(v.Nodes, nodeVersion{Node: n.GetMember().GetId(), Version: n.GetMember().GetVersion()})
					}
					return nil
				}
				// Without the control plane, each node says its own.
				answers, errs := askNodes(resp.GetNodes(), func(n *pb.Node) (string, error) { return c.NodeVersion(cmd.Context(), n) })
				for i, n := range resp.GetNodes() {
					nv := nodeVersion{Node: n.GetMember().GetId(), Version: answers[i]}
					if errs[i] != nil {
						nv.Unreachable = errs[i].Error()
					}
					v.Nodes = append(v.Nodes, nv)
				}
				return nil
			})
			if rerr := render(cmd.OutOrStdout(), g.output, v, func(tw *tabwriter.Writer) { versionTable(tw, v, len(g.nodes) > 0) }); rerr != nil {
				return rerr
			}
			return err
		},
	}
}

func versionTable(tw *tabwriter.Writer, v *versions, viaNodes bool) {
	fmt.Fprintf(tw, "client\t%s\t%s\n", v.Client.Version, v.Client.GoVersion)
	switch cp := v.ControlPlane; {
	case cp != nil:
		fmt.Fprintf(tw, "control plane\t%s\t%s\treplica %s\n", cp.Version, cp.GoVersion, dash(cp.Replica))
	case viaNodes:
		fmt.Fprintln(tw, "control plane\tnot asked (--nodes)")
	default:
		fmt.Fprintln(tw, "control plane\tunreachable")
	}
	for _, n := range v.Nodes {
		if n.Unreachable != "" {
			fmt.Fprintf(tw, "%s\tunreachable\n", shown(n.Node))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\n", shown(n.Node), dash(shown(n.Version)))
	}
}
