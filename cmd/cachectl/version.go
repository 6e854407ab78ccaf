package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/sdk/admin"
)

// versions is what `cachectl version` prints.
type versions struct {
	Client build `json:"client"`
	// ControlPlane is nil when the control plane did not answer.
	ControlPlane *build `json:"control_plane"`
}

// build describes one program's build; Replica is set for the control
// plane only.
type build struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Replica   string `json:"replica_id,omitempty"`
}

func newVersionCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the versions of cachectl and of the control plane",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(g.output); err != nil {
				return err
			}
			v := &versions{Client: clientBuild()}
			err := g.withClient(func(c *admin.Client) error {
				cp, err := c.Version(cmd.Context())
				if err == nil {
					v.ControlPlane = &build{Version: cp.GetVersion(), GoVersion: cp.GetGoVersion(), Replica: cp.GetReplicaId()}
				}
				return err
			})
			if rerr := render(cmd.OutOrStdout(), g.output, v, func(tw *tabwriter.Writer) { versionTable(tw, v) }); rerr != nil {
				return rerr
			}
			if err != nil {
				return fmt.Errorf("control plane version: %w", err)
			}
			return nil
		},
	}
}

// clientBuild is cachectl's module version, or its VCS revision when built
// from a checkout, and the Go version.
func clientBuild() build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return build{Version: "unknown", GoVersion: runtime.Version()}
	}
	b := build{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if b.Version == "" || b.Version == "(devel)" {
		b.Version = "(devel)"
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if rev := settings["vcs.revision"]; rev != "" {
			b.Version = rev
			if settings["vcs.modified"] == "true" {
				b.Version += "-dirty"
			}
		}
	}
	return b
}

func versionTable(tw *tabwriter.Writer, v *versions) {
	fmt.Fprintf(tw, "client\t%s\t%s\n", v.Client.Version, v.Client.GoVersion)
	if cp := v.ControlPlane; cp != nil {
		fmt.Fprintf(tw, "control plane\t%s\t%s\treplica %s\n", cp.Version, cp.GoVersion, dash(cp.Replica))
	} else {
		fmt.Fprintln(tw, "control plane\tunreachable")
	}
}
