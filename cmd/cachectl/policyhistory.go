package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/cmd/internal/policyfile"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newPolicyDiffCommand(g *globalOptions) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "diff -f FILE",
		Short: "Show what policy apply -f FILE would change, line by line, after validating it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			policies, data, err := readPolicyFile(cmd, file)
			if err != nil {
				return err
			}
			return g.withClient(func(c *admin.Client) error {
				if _, err := c.PutPolicies(cmd.Context(), policies, true); err != nil {
					return withLines(err, file, data) // refused: the diff would not apply
				}
				list, err := c.ListPolicies(cmd.Context())
				if err != nil {
					return err
				}
				stored := map[string]*pb.CachePolicy{}
				for _, p := range list.GetPolicies() {
					stored[p.GetName()] = p
				}
				changed := 0
				for _, p := range policies {
					old := stored[p.GetName()]
					oldName := fmt.Sprintf("policy %s (stored)", p.GetName())
					if old != nil {
						oldName = fmt.Sprintf("policy %s (stored, revision %d)", p.GetName(), old.GetRevision())
					}
					d, err := policyDiff(old, p, oldName, fmt.Sprintf("policy %s (%s)", p.GetName(), file))
					if err != nil {
						return err
					}
					if d != "" {
						changed++
						fmt.Fprint(cmd.OutOrStdout(), d)
					}
				}
				if changed == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "no changes: %s matches the stored policies (revision %d)\n", file, list.GetRevision())
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "policy file (YAML or JSON; - reads standard input)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func newPolicyHistoryCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "history [NAME]",
		Short: "List the recorded changes of the policies (of one policy), newest first",
		Long: `List the recorded changes of the policy set, newest first: each change's revision,
time, action (apply, delete, rollback) and the policies it created, changed or deleted. The
control plane keeps a bounded number of changes (shown); policy rollback REV restores the set
as it was at any revision since the oldest kept. -o yaml or json has each policy before and
after.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completePolicies(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return g.withClient(func(c *admin.Client) error {
				h, err := c.PolicyHistory(cmd.Context(), name)
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), g.output, h, func(tw *tabwriter.Writer) { historyTable(tw, h) })
			})
		},
	}
}

func historyTable(tw *tabwriter.Writer, h *pb.PolicyHistoryResponse) {
	fmt.Fprintf(tw, "CURRENT REVISION %d (the last %d changes are kept)\n", h.GetRevision(), h.GetMaxEntries())
	fmt.Fprintln(tw, "REVISION\tTIME\tACTION\tPOLICIES")
	for _, e := range h.GetEntries() {
		action := e.GetAction()
		if e.GetRolledBackTo() != 0 {
			action += " to " + strconv.FormatInt(e.GetRolledBackTo(), 10)
		}
		var ps []string
		for _, c := range e.GetChanges() {
			ps = append(ps, c.GetName()+" "+changeVerb(c))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", e.GetRevision(), e.GetAt().AsTime().UTC().Format(time.DateTime), action, strings.Join(ps, ", "))
	}
}

// changeVerb says what a change did to its policy.
func changeVerb(c *pb.PolicyChange) string {
	switch {
	case c.Before == nil:
		return "created"
	case c.After == nil:
		return "deleted"
	}
	return "changed"
}

func newPolicyRollbackCommand(g *globalOptions) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "rollback REVISION",
		Short: "Restore the policies as they were at a revision (see policy history), as one new change",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rev, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || rev < 1 {
				return command.Usage(fmt.Errorf("revision %q: want a revision number from policy history", args[0]))
			}
			return g.withClient(func(c *admin.Client) error {
				resp, err := c.RollbackPolicies(cmd.Context(), rev, dryRun)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if len(resp.GetChanges()) == 0 {
					fmt.Fprintf(out, "nothing to change: the policies are as they were at revision %d\n", rev)
					return nil
				}
				for _, ch := range resp.GetChanges() {
					if err := printChange(out, ch); err != nil {
						return err
					}
				}
				if dryRun {
					fmt.Fprintf(out, "dry run: nothing changed; rolling back to revision %d would make the changes above\n", rev)
				} else {
					fmt.Fprintf(out, "rolled back to revision %d: the policies are now at revision %d\n", rev, resp.GetRevision())
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only show what would change")
	return cmd
}

func printChange(w io.Writer, ch *pb.PolicyChange) error {
	d, err := policyDiff(ch.GetBefore(), ch.GetAfter(), "policy "+ch.GetName()+" (now)", "policy "+ch.GetName()+" (restored)")
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(w, d)
	return err
}

// policyDiff is a unified diff of two policies in the file format; nil is
// no policy. Empty when they are the same.
func policyDiff(a, b *pb.CachePolicy, aName, bName string) (string, error) {
	text := func(p *pb.CachePolicy) ([]string, error) {
		if p == nil {
			return nil, nil
		}
		c := proto.Clone(p).(*pb.CachePolicy)
		c.Revision = 0
		out, err := policyfile.Marshal([]*pb.CachePolicy{c}, "yaml")
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"), nil
	}
	x, err := text(a)
	if err != nil {
		return "", err
	}
	y, err := text(b)
	if err != nil {
		return "", err
	}
	d := lineDiff(x, y)
	if d == nil {
		return "", nil
	}
	return fmt.Sprintf("--- %s\n+++ %s\n%s", aName, bName, strings.Join(d, "\n")+"\n"), nil
}

// lineDiff is a unified diff of a and b (every line, marked " ", "-" or
// "+"), from their longest common subsequence; nil when they are equal.
// Policies are a few dozen lines: quadratic is fine.
func lineDiff(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	changed := false
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, " "+a[i])
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "-"+a[i])
			i++
			changed = true
		default:
			out = append(out, "+"+b[j])
			j++
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return out
}
