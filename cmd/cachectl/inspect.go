package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/units"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

func newInspectCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect URL",
		Short: "Show what each node stores for a URL, and why it is fresh or not",
		Long: `Show what each node stores for a URL: on its owners, and on any node holding a hot
copy, each stored response (its Vary variant, a stored range, slices held), its tier
(memory or disk), size, age, freshness left and where that comes from (the directive or
the policy), validators and tags; and the policy, key and owners that apply; and each
node's last answer for the key that was not a plain hit, with the rule that decided
(no-store, set-cookie, expired, purged... as Cache-Status's detail). It answers
"why was this a MISS?". Each node is asked at its ops listener (its member's ops_url)
with the admin token; a node that does not answer is shown as unreachable.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := parseURL(args[0])
			if err != nil {
				return err
			}
			return g.withClient(func(c *admin.Client) error {
				resp, err := g.listNodes(cmd.Context(), c)
				if err != nil {
					return err
				}
				in := inspect(cmd.Context(), c, resp, u.String())
				in.wide = g.output == "wide"
				return render(cmd.OutOrStdout(), g.output, in, func(tw *tabwriter.Writer) { inspectTable(tw, in) })
			})
		},
	}
}

// inspection is what `cachectl inspect` prints.
type inspection struct {
	URL    string   `json:"url"`
	Policy string   `json:"policy"`
	Key    string   `json:"key"`
	Owners []string `json:"owners"`
	// Stored says whether any node that answered holds anything for it.
	Stored bool             `json:"stored"`
	Nodes  []nodeInspection `json:"nodes"`
	wide   bool             // every column on one line, not the 80 that fit a terminal
}

// nodeInspection is one node's answer: what it holds, or why it did not
// answer.
type nodeInspection struct {
	Node        string               `json:"node"`
	Owner       bool                 `json:"owner"`
	Objects     []admin.StoredObject `json:"objects"`
	Last        *admin.LastAnswer    `json:"last,omitempty"`
	Unreachable string               `json:"unreachable,omitempty"`
}

// inspect asks every node, at once, what it stores for rawURL.
func inspect(ctx context.Context, c *admin.Client, resp *pb.ListNodesResponse, rawURL string) *inspection {
	nodes := resp.GetNodes()
	answers, errs := askNodes(nodes, func(n *pb.Node) (*admin.Inspection, error) { return c.Inspect(ctx, n, rawURL) })
	in := &inspection{URL: rawURL, Owners: []string{}, Nodes: []nodeInspection{}}
	for i, n := range nodes {
		ni := nodeInspection{Node: n.GetMember().GetId(), Objects: []admin.StoredObject{}}
		if errs[i] != nil {
			ni.Unreachable = errs[i].Error()
		} else {
			a := answers[i]
			if in.Key == "" && a.Key != "" {
				in.Policy, in.Key, in.Owners = a.Policy, a.Key, a.Owners
			}
			ni.Owner, ni.Objects, ni.Last = a.Owner, a.Objects, a.Last
			in.Stored = in.Stored || len(a.Objects) > 0
		}
		in.Nodes = append(in.Nodes, ni)
	}
	return in
}

// inspectTable fits 80 columns: each stored object is a row, and the
// line under it says where its freshness comes from, its variant,
// validators and tags. -o wide puts them all on the row.
func inspectTable(tw *tabwriter.Writer, in *inspection) {
	shownOwners := make([]string, len(in.Owners))
	for i, o := range in.Owners {
		shownOwners[i] = shown(o)
	}
	owners := strings.Join(shownOwners, ", ")
	if len(in.Owners) > 1 {
		owners = shownOwners[0] + " (and " + strings.Join(shownOwners[1:], ", ") + " while the key is hot)"
	}
	fmt.Fprintf(tw, "URL\t%s\nPOLICY\t%s\nKEY\t%s\nOWNER\t%s\n\n", shown(in.URL), shown(in.Policy), shown(in.Key), owners)
	// The rows are aligned apart from the detail lines under them, which
	// a tabwriter would take as the end of the columns.
	var rows bytes.Buffer
	rt := tabwriter.NewWriter(&rows, 0, 4, 2, ' ', 0)
	var details []string // under each row after the header; "" for none
	if in.wide {
		fmt.Fprintln(rt, "NODE\tKIND\tVARIANT\tTIER\tSIZE\tAGE\tFRESH FOR\tFRESHNESS\tVALIDATORS\tTAGS")
	} else {
		fmt.Fprintln(rt, "NODE\tKIND\tTIER\tSIZE\tAGE\tFRESH FOR")
	}
	// cells writes a row of a node's words, each escaped (shown).
	cells := func(cs ...string) {
		for i := range cs {
			cs[i] = shown(cs[i])
		}
		if !in.wide { // NODE KIND TIER SIZE AGE FRESH FOR; the rest below
			var d []string
			for i, label := range []string{"", "", "variant ", "", "", "", "", "freshness ", "validators ", "tags "} {
				if label != "" && cs[i] != "-" {
					d = append(d, label+cs[i])
				}
			}
			details = append(details, wrap(strings.Join(d, "; "), 76))
			cs = []string{cs[0], cs[1], cs[3], cs[4], cs[5], cs[6]}
		}
		fmt.Fprintln(rt, strings.Join(cs, "\t"))
	}
	var unreachable []string
	for _, n := range in.Nodes {
		name := n.Node
		switch {
		case len(in.Owners) > 0 && n.Node == in.Owners[0]:
			name += " (owner)"
		case n.Owner:
			name += " (hot owner)"
		}
		// Every row has every cell, so that the columns stay aligned.
		switch {
		case n.Unreachable != "":
			cells(name, "unreachable", "-", "-", "-", "-", "-", "-", "-", "-")
			unreachable = append(unreachable, shown(n.Node)+": "+shown(n.Unreachable))
		case len(n.Objects) == 0 && len(in.Owners) > 0 && n.Node == in.Owners[0]:
			cells(name, "not stored", "-", "-", "-", "-", "-", "-", "-", "-")
		}
		for _, o := range n.Objects {
			variant := dash(o.Variant)
			if o.Range != "" {
				variant = o.Range
			}
			if o.Slices > 0 {
				variant = fmt.Sprintf("%d slices here", o.Slices)
			}
			fresh := (time.Duration(o.FreshFor) * time.Second).String()
			if o.FreshFor < 0 {
				fresh = "stale " + (time.Duration(-o.FreshFor) * time.Second).String()
			}
			validators := strings.TrimSpace(o.ETag + " " + o.LastModified)
			cells(name, o.Kind, variant, o.Tier, units.Bytes(o.Size), (time.Duration(o.Age) * time.Second).String(), fresh,
				dash(o.Freshness), dash(validators), dash(strings.Join(o.Tags, ",")))
		}
	}
	rt.Flush()
	lines := strings.Split(strings.TrimSuffix(rows.String(), "\n"), "\n")
	for i, l := range lines {
		fmt.Fprintln(tw, strings.TrimRight(l, " "))
		if i > 0 && i-1 < len(details) && details[i-1] != "" {
			fmt.Fprintln(tw, "  "+strings.ReplaceAll(details[i-1], "\n  ", "\n    "))
		}
	}
	for _, u := range unreachable {
		fmt.Fprintf(tw, "\n%s", wrap(u, 80))
	}
	if len(unreachable) > 0 {
		fmt.Fprintln(tw)
	}
	if !in.Stored {
		fmt.Fprintf(tw, "\nnot stored: no node that answered holds %s\n", shown(in.URL))
	}
	for _, n := range in.Nodes {
		if n.Last != nil {
			fmt.Fprintf(tw, "\n%s", wrap(shown(n.Node)+" last: "+lastAnswer(n.Last), 80))
		}
	}
	if slices.ContainsFunc(in.Nodes, func(n nodeInspection) bool { return n.Last != nil }) {
		fmt.Fprintln(tw)
	}
}

// lastAnswer is a node's last answer other than a plain hit, as a phrase:
// "MISS 200, not stored: set-cookie, 3s ago"; "purged 1m0s ago".
func lastAnswer(l *admin.LastAnswer) string {
	ago := (time.Duration(l.Age) * time.Second).String() + " ago"
	reason := shown(l.Reason)
	if l.Cache == "" {
		return reason + " " + ago
	}
	s := shown(l.Cache)
	if l.Status > 0 {
		s += fmt.Sprintf(" %d", l.Status)
	}
	if l.Stored {
		return s + ", stored (" + reason + "), " + ago
	}
	return s + ", not stored: " + reason + ", " + ago
}
