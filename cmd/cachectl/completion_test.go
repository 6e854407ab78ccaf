package main

import (
	"strings"
	"testing"
)

func TestCompletion(t *testing.T) {
	out, _, err := runCachectl(t, "completion", "bash")
	if err != nil || !strings.Contains(out, "bash completion V2 for cachectl") {
		t.Fatalf("completion bash: %v\n%.200s", err, out)
	}
	out, _, err = runCachectl(t, "__complete", "nodes", "-o", "")
	if err != nil || !strings.HasPrefix(out, "table\nwide\njson\nyaml\n:4\n") {
		t.Fatalf("completing -o: %v\n%s", err, out)
	}
	// With the control plane down, node ids complete to nothing, quickly
	// and without an error.
	out, _, err = runCachectl(t, "__complete", "drain", "")
	if err != nil || !strings.HasPrefix(out, ":4\n") {
		t.Fatalf("completing drain: %v\n%s", err, out)
	}
}
