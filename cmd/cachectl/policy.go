package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/cmd/internal/policyfile"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newPolicyCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Read and change cache policies"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List the policies", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return g.withClient(func(c *admin.Client) error {
					resp, err := c.ListPolicies(cmd.Context())
					if err != nil {
						return err
					}
					return render(cmd.OutOrStdout(), g.output, resp, func(tw *tabwriter.Writer) {
						fmt.Fprintf(tw, "REVISION %d\n", resp.GetRevision())
						fmt.Fprintln(tw, "NAME\tHOSTS\tPATH PREFIX\tMODE\tREVISION")
						for _, p := range resp.GetPolicies() {
							fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", p.GetName(), dash(strings.Join(p.GetHosts(), ",")),
								dash(p.GetPathPrefix()), modeName(p.GetMode()), p.GetRevision())
						}
					})
				})
			},
		},
		&cobra.Command{
			Use: "get NAME", Short: "Show one policy in the file format policy apply takes (YAML, or -o json)", Args: cobra.ExactArgs(1),
			ValidArgsFunction: completePolicies(g),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := checkFormat(g.output); err != nil {
					return err
				}
				return g.withClient(func(c *admin.Client) error {
					p, err := c.GetPolicy(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					format := "yaml" // a policy has too many fields for a table
					if g.output == "json" {
						format = "json"
					}
					b, err := policyfile.Marshal([]*pb.CachePolicy{p}, format)
					if err != nil {
						return err
					}
					_, err = cmd.OutOrStdout().Write(b)
					return err
				})
			},
		},
		newPolicyApplyCommand(g), newPolicyDiffCommand(g), newPolicyHistoryCommand(g), newPolicyRollbackCommand(g),
		&cobra.Command{
			Use: "delete NAME", Short: "Delete a policy", Args: cobra.ExactArgs(1),
			ValidArgsFunction: completePolicies(g),
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.withClient(func(c *admin.Client) error {
					rev, err := c.DeletePolicy(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "policy %s deleted (revision %d)\n", args[0], rev)
					return nil
				})
			},
		},
		&cobra.Command{
			Use: "status", Short: "Show which policy revision each node runs", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return g.withClient(func(c *admin.Client) error {
					st, err := c.PolicyStatus(cmd.Context())
					if err != nil {
						return err
					}
					return render(cmd.OutOrStdout(), g.output, st, func(tw *tabwriter.Writer) {
						fmt.Fprintf(tw, "CURRENT REVISION %d\n", st.GetRevision())
						fmt.Fprintln(tw, "NODE\tAPPLIED\tCURRENT\tREFUSED\tREASON")
						for _, n := range st.GetNodes() {
							refused := "-"
							if n.GetRefusedRevision() != 0 {
								refused = strconv.FormatInt(n.GetRefusedRevision(), 10)
							}
							fmt.Fprintf(tw, "%s\t%d\t%t\t%s\t%s\n", n.GetNodeId(), n.GetAppliedRevision(),
								n.GetAppliedRevision() == st.GetRevision(), refused, dash(n.GetError()))
						}
					})
				})
			},
		},
	)
	return cmd
}

type policyApplyOptions struct {
	*globalOptions
	file   string
	dryRun bool
}

func newPolicyApplyCommand(g *globalOptions) *cobra.Command {
	o := &policyApplyOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace the policies in a YAML or JSON file (- for standard input)",
		Long: `Create or replace the policies in FILE: one policy, or a list of them, in YAML or
JSON with the fields of shardcache.v1.CachePolicy by name, as policy get prints them.
mode is sharded, local, redirect or bypass; durations are 90s, 10m or 1h30m; slice_size and
max_object_size take units (8MiB, 10GiB, 10GB, 512mib, 10g); excluded_statuses entries are
"404" or "300-399"; a status_ttls entry is {status: "200-299", ttl: 10m}. Every mistake is
named with its line, and what is allowed. A policy equal to the stored one is left as it
is (no new revision).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "", "policy file (YAML or JSON; - reads standard input)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "validate only; change nothing")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (o *policyApplyOptions) run(cmd *cobra.Command) error {
	policies, data, err := readPolicyFile(cmd, o.file)
	if err != nil {
		return err
	}
	return o.withClient(func(c *admin.Client) error {
		before, err := c.ListPolicies(cmd.Context())
		if err != nil {
			return err
		}
		// All the file's policies, or none: one call, one transaction.
		stored, err := c.PutPolicies(cmd.Context(), policies, o.dryRun)
		if err != nil {
			return withLines(err, o.file, data)
		}
		for _, stored := range stored {
			switch {
			case o.dryRun:
				fmt.Fprintf(cmd.OutOrStdout(), "policy %s is valid (dry run, nothing changed)\n", stored.GetName())
			case stored.GetRevision() <= before.GetRevision():
				fmt.Fprintf(cmd.OutOrStdout(), "policy %s unchanged (revision %d)\n", stored.GetName(), stored.GetRevision())
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "policy %s applied (revision %d)\n", stored.GetName(), stored.GetRevision())
			}
		}
		return nil
	})
}

// readPolicyFile reads and parses the policies of file (- for standard
// input); a refused file is a usage error naming the file.
func readPolicyFile(cmd *cobra.Command, file string) ([]*pb.CachePolicy, []byte, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxPolicyFile+1))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading policy file: %w", err)
	}
	if len(data) > maxPolicyFile {
		return nil, nil, command.Usage(fmt.Errorf("%s: larger than %d bytes", file, maxPolicyFile))
	}
	policies, err := policyfile.Parse(data)
	if err != nil {
		return nil, nil, command.Usage(fmt.Errorf("%s: %w", file, err))
	}
	return policies, data, nil
}

// withLines gives each field the control plane refused its line in the
// file, as the file's own mistakes have.
func withLines(err error, file string, data []byte) error {
	var ve *admin.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	return &locatedError{file: file, data: data, ve: ve}
}

// locatedError is a refused policy, each field named with its line.
type locatedError struct {
	file string
	data []byte
	ve   *admin.ValidationError
}

func (e *locatedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: policy %q is refused:", e.file, e.ve.Policy)
	for _, f := range e.ve.Fields {
		b.WriteString("\n  ")
		if line := policyfile.Line(e.data, e.ve.Policy, f.Field); line > 0 {
			fmt.Fprintf(&b, "line %d: ", line)
		}
		fmt.Fprintf(&b, "%s: %s", f.Field, f.Description)
	}
	return b.String()
}

// Unwrap keeps the validation error (and so ErrInvalid) in the chain.
func (e *locatedError) Unwrap() error { return e.ve }

// maxPolicyFile bounds what is read of a policy file: 100 policies of at
// most 4 KiB encoded, with room for YAML's spelling.
const maxPolicyFile = 4 << 20

func modeName(m pb.CacheMode) string {
	if m == pb.CacheMode_CACHE_MODE_UNSPECIFIED {
		return "sharded"
	}
	return strings.ToLower(strings.TrimPrefix(m.String(), "CACHE_MODE_"))
}
