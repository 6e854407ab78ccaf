package main

import (
	"strings"
	"testing"
)

func TestLineDiff(t *testing.T) {
	a := []string{"name: a", "max_variants: 8", "mode: sharded"}
	b := []string{"name: a", "max_variants: 4", "mode: sharded", "compress: false"}
	got := strings.Join(lineDiff(a, b), "\n")
	want := " name: a\n-max_variants: 8\n+max_variants: 4\n mode: sharded\n+compress: false"
	if got != want {
		t.Fatalf("lineDiff:\n%s\nwant\n%s", got, want)
	}
	if lineDiff(a, a) != nil {
		t.Fatal("equal inputs differ")
	}
	if d := strings.Join(lineDiff(nil, a[:1]), "\n"); d != "+name: a" {
		t.Fatalf("a new policy: %q", d)
	}
}
