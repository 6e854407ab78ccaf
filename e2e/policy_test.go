package e2e

import (
	"context"
	"os"
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
