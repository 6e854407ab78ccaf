package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPolicyApplyIsAllOrNothing applies, with the real cachectl, a file of
// three policies whose third is invalid: the refusal names it, and none of
// the three is applied. The file fixed applies all three at once.
func TestPolicyApplyIsAllOrNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 1, "")
	file := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(third string) {
		doc := "- name: one\n  path_prefix: /one/\n- name: two\n  path_prefix: /two/\n- name: three\n  path_prefix: /three/\n  key_template: " + third + "\n"
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	listed := func() int {
		var list struct {
			Policies []struct {
				Name string `json:"name"`
			} `json:"policies"`
		}
		if err := c.cachectl(ctx, &list, "policy", "list"); err != nil {
			t.Fatal(err)
		}
		return len(list.Policies)
	}
	write(`"$1$uri"`)
	err := c.cachectlText(ctx, "policy", "apply", "-f", file)
	if err == nil || !strings.Contains(err.Error(), "three") {
		t.Fatalf("applying a file with an invalid third policy: %v; want a refusal naming it", err)
	}
	if n := listed(); n != 0 {
		t.Fatalf("%d policies applied from a refused file, want none", n)
	}
	write(`"$scheme$host$uri"`)
	if err := c.cachectlText(ctx, "policy", "apply", "-f", file); err != nil {
		t.Fatal(err)
	}
	if n := listed(); n != 3 {
		t.Fatalf("%d policies applied, want 3", n)
	}
}

// TestPolicyLifecycle: a policy file applied and read back with policy get
// -o yaml is the same file (golden), and piping get into apply -f -
// changes nothing; policy diff shows a change before it is applied,
// policy history lists the changes, and policy rollback restores the
// first revision.
func TestPolicyLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 1, "")
	bin := filepath.Join(binDir, "cachectl")
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--control-plane", c.control, "--token", c.token}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cachectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	golden := filepath.Join("testdata", "policy-static.yaml")
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out := run("", "policy", "apply", "-f", golden); !strings.Contains(out, "policy static applied (revision ") {
		t.Fatalf("apply: %s", out)
	}
	got := run("", "policy", "get", "static", "-o", "yaml")
	first, rest, _ := strings.Cut(got, "\n")
	if !strings.HasPrefix(first, "# revision ") || rest != string(want) {
		t.Fatalf("policy get -o yaml after applying %s:\n%s\nwant a revision comment, then the file unchanged", golden, got)
	}
	rev1 := strings.Fields(first)[2]
	if out := run(got, "policy", "apply", "-f", "-"); !strings.Contains(out, "policy static unchanged (revision "+rev1+")") {
		t.Fatalf("policy get | policy apply -f -: %s; want unchanged at revision %s", out, rev1)
	}
	if out := run("", "policy", "diff", "-f", golden); !strings.Contains(out, "no changes") {
		t.Fatalf("policy diff of the applied file: %s", out)
	}

	changed := filepath.Join(t.TempDir(), "changed.yaml")
	if err := os.WriteFile(changed, []byte(strings.Replace(string(want), "max_variants: 8", "max_variants: 4", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	diff := run("", "policy", "diff", "-f", changed)
	if !strings.Contains(diff, "\n-max_variants: 8\n+max_variants: 4\n") {
		t.Fatalf("policy diff:\n%s\nwant max_variants 8 -> 4", diff)
	}
	if out := run("", "policy", "get", "static"); !strings.Contains(out, "max_variants: 8") {
		t.Fatalf("policy diff changed the policy:\n%s", out)
	}
	run("", "policy", "apply", "-f", changed)
	history := run("", "policy", "history")
	if strings.Count(history, "apply") != 2 || !strings.Contains(history, rev1+" ") {
		t.Fatalf("policy history:\n%s\nwant two applies, the first at %s", history, rev1)
	}
	if out := run("", "policy", "rollback", rev1); !strings.Contains(out, "rolled back to revision "+rev1) || !strings.Contains(out, "+max_variants: 8") {
		t.Fatalf("policy rollback %s:\n%s", rev1, out)
	}
	if _, rest, _ := strings.Cut(run("", "policy", "get", "static"), "\n"); rest != string(want) {
		t.Fatalf("after the rollback, policy get:\n%s\nwant the first file", rest)
	}
	if history := run("", "policy", "history", "static"); !strings.Contains(history, "rollback to "+rev1) {
		t.Fatalf("policy history after the rollback:\n%s", history)
	}
}
