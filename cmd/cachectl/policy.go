package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

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
			Use: "get NAME", Short: "Show one policy (YAML by default)", Args: cobra.ExactArgs(1),
			ValidArgsFunction: completePolicies(g),
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.withClient(func(c *admin.Client) error {
					p, err := c.GetPolicy(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					format := g.output
					if format == "table" {
						format = "yaml" // a policy has too many fields for a table
					}
					return render(cmd.OutOrStdout(), format, p, nil)
				})
			},
		},
		newPolicyApplyCommand(g),
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
JSON with the fields of shardcache.v1.CachePolicy. Conveniences: mode may be written
sharded, local, redirect or bypass; excluded_statuses may be "404" or "300-399";
a status_ttls entry may be {status: "200-299", ttl: 10m}. Every bad field is named.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "", "policy file (YAML or JSON; - reads standard input)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "validate only; change nothing")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (o *policyApplyOptions) run(cmd *cobra.Command) error {
	var data []byte
	var err error
	if o.file == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(o.file)
	}
	if err != nil {
		return fmt.Errorf("reading policy file: %w", err)
	}
	policies, err := parsePolicies(data)
	if err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	return o.withClient(func(c *admin.Client) error {
		// All the file's policies, or none: one call, one transaction.
		stored, err := c.PutPolicies(cmd.Context(), policies, o.dryRun)
		if err != nil {
			return err
		}
		for _, stored := range stored {
			if o.dryRun {
				fmt.Fprintf(cmd.OutOrStdout(), "policy %s is valid (dry run, nothing changed)\n", stored.GetName())
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "policy %s applied (revision %d)\n", stored.GetName(), stored.GetRevision())
			}
		}
		return nil
	})
}

// parsePolicies reads one policy or a list of them from YAML or JSON.
func parsePolicies(data []byte) ([]*pb.CachePolicy, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	var items []map[string]any
	if trimmed := bytes.TrimSpace(js); len(trimmed) > 0 && trimmed[0] == '[' {
		err = json.Unmarshal(js, &items)
	} else {
		var one map[string]any
		err = json.Unmarshal(js, &one)
		items = []map[string]any{one}
	}
	if err != nil {
		return nil, fmt.Errorf("want a policy or a list of policies: %w", err)
	}
	var out []*pb.CachePolicy
	for i, item := range items {
		if err := expandShorthands(item); err != nil {
			return nil, fmt.Errorf("policy %d: %w", i+1, err)
		}
		b, _ := json.Marshal(item)
		p := &pb.CachePolicy{}
		if err := protojson.Unmarshal(b, p); err != nil {
			return nil, fmt.Errorf("policy %d: %w", i+1, err)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no policy in the file")
	}
	return out, nil
}

// durationFields take Go durations ("10m", "1h30m") in files, converted to
// the seconds protobuf JSON wants.
var durationFields = []string{"default_ttl", "defaultTtl", "stale_while_revalidate", "staleWhileRevalidate", "stale_if_error",
	"staleIfError", "collapse_timeout", "collapseTimeout", "origin_timeout", "originTimeout", "relay_timeout", "relayTimeout"}

func expandDuration(m map[string]any, key string) error {
	s, ok := m[key].(string)
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%s %q: want a duration such as 90s, 10m or 1h", key, s)
	}
	m[key] = strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	return nil
}

// expandShorthands turns the file's conveniences into protobuf JSON.
func expandShorthands(p map[string]any) error {
	for _, f := range durationFields {
		if err := expandDuration(p, f); err != nil {
			return err
		}
	}
	if m, ok := p["mode"].(string); ok && !strings.HasPrefix(m, "CACHE_MODE_") {
		p["mode"] = "CACHE_MODE_" + strings.ToUpper(m)
	}
	for _, key := range []string{"excluded_statuses", "excludedStatuses"} {
		list, ok := p[key].([]any)
		if !ok {
			continue
		}
		for i, v := range list {
			s, ok := v.(string)
			if !ok {
				continue
			}
			from, to, err := statusRange(s)
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", key, i, err)
			}
			list[i] = map[string]any{"from": from, "to": to}
		}
	}
	for _, key := range []string{"status_ttls", "statusTtls"} {
		list, ok := p[key].([]any)
		if !ok {
			continue
		}
		for i, v := range list {
			m, ok := v.(map[string]any)
			if !ok {
				continue
			}
			if err := expandDuration(m, "ttl"); err != nil {
				return fmt.Errorf("%s[%d]: %w", key, i, err)
			}
			if s, ok := m["status"].(string); ok {
				from, to, err := statusRange(s)
				if err != nil {
					return fmt.Errorf("%s[%d]: %w", key, i, err)
				}
				delete(m, "status")
				m["status_from"], m["status_to"] = from, to
			}
		}
	}
	return nil
}

// statusRange parses "404" or "300-399".
func statusRange(s string) (uint32, uint32, error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	from, err := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("status %q: want a code like 404 or a range like 300-399", s)
	}
	to := from
	if isRange {
		if to, err = strconv.ParseUint(strings.TrimSpace(b), 10, 32); err != nil {
			return 0, 0, fmt.Errorf("status %q: want a code like 404 or a range like 300-399", s)
		}
	}
	return uint32(from), uint32(to), nil
}

func modeName(m pb.CacheMode) string {
	if m == pb.CacheMode_CACHE_MODE_UNSPECIFIED {
		return "sharded"
	}
	return strings.ToLower(strings.TrimPrefix(m.String(), "CACHE_MODE_"))
}
