package command

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestRunExitStatus(t *testing.T) {
	errOdd := errors.New("odd")
	root := func() *cobra.Command {
		r := &cobra.Command{Use: "tool"}
		r.AddCommand(&cobra.Command{Use: "one ARG", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }},
			&cobra.Command{Use: "fail", RunE: func(*cobra.Command, []string) error { return errors.New("plain") }},
			&cobra.Command{Use: "odd", RunE: func(*cobra.Command, []string) error { return errOdd }},
			&cobra.Command{Use: "partial", RunE: func(*cobra.Command, []string) error { return WithCode(ExitPartial, errors.New("some")) }})
		return r
	}
	classify := func(err error) int {
		if errors.Is(err, errOdd) {
			return ExitNotFound
		}
		return 0
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"one", "a"}, ExitOK},
		{[]string{"one"}, ExitUsage},
		{[]string{"one", "a", "--nope"}, ExitUsage},
		{[]string{"nosuch"}, ExitUsage},
		{[]string{"fail"}, ExitFailure},
		{[]string{"odd"}, ExitNotFound},
		{[]string{"partial"}, ExitPartial},
	} {
		var stderr bytes.Buffer
		if got := Run(context.Background(), "tool", root(), tc.args, &stderr, classify); got != tc.want {
			t.Errorf("tool %v: exit %d, want %d (%s)", tc.args, got, tc.want, stderr.String())
		}
		if tc.want != ExitOK && !strings.HasPrefix(stderr.String(), "tool: ") {
			t.Errorf("tool %v: stderr %q, want one line starting tool: ", tc.args, stderr.String())
		}
	}
	r := root()
	markUsage(r)
	if !strings.Contains(r.Long, "6  partial") {
		t.Fatalf("the help does not list the exit statuses:\n%s", r.Long)
	}
}

// A word under a group that names none of its subcommands is a usage
// error, with a suggestion, as under the root; a group alone prints its
// help, and one with an action of its own still runs it.
func TestGroupsRefuseUnknownSubcommands(t *testing.T) {
	ran := ""
	root := func() *cobra.Command {
		r := &cobra.Command{Use: "tool"}
		group := &cobra.Command{Use: "policy", Short: "policies"}
		group.AddCommand(&cobra.Command{Use: "apply", RunE: func(*cobra.Command, []string) error { ran = "apply"; return nil }})
		own := &cobra.Command{Use: "ring", RunE: func(*cobra.Command, []string) error { ran = "ring"; return nil }}
		own.AddCommand(&cobra.Command{Use: "diff", RunE: func(*cobra.Command, []string) error { ran = "diff"; return nil }})
		r.AddCommand(group, own)
		return r
	}
	for _, tc := range []struct {
		args          []string
		want          int
		ran, stderrIs string
	}{
		{[]string{"policy", "aply"}, ExitUsage, "", `tool: unknown command "aply" for "tool policy"; did you mean apply?`},
		{[]string{"policy", "set", "x"}, ExitUsage, "", `tool: unknown command "set" for "tool policy"`},
		{[]string{"policy", "apply"}, ExitOK, "apply", ""},
		{[]string{"policy"}, ExitOK, "", ""},
		{[]string{"policy", "help"}, ExitOK, "", ""},
		{[]string{"ring", "dif"}, ExitUsage, "", `tool: unknown command "dif" for "tool ring"; did you mean diff?`},
		{[]string{"ring"}, ExitOK, "ring", ""},
	} {
		ran = ""
		var stderr bytes.Buffer
		r := root()
		r.SetOut(&bytes.Buffer{})
		if got := Run(context.Background(), "tool", r, tc.args, &stderr, nil); got != tc.want || ran != tc.ran ||
			strings.TrimSpace(stderr.String()) != tc.stderrIs {
			t.Errorf("%v: exit %d, ran %q, stderr %q; want %d, %q, %q", tc.args, got, ran, stderr.String(), tc.want, tc.ran, tc.stderrIs)
		}
	}
}
