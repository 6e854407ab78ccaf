package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/cmd/internal/command"
)

// The README says what cachectl does: the purge wait's default and the
// exit statuses.
func TestREADMEMatchesCachectl(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	purge, _, err := newRootCommand().Find([]string{"purge"})
	if err != nil {
		t.Fatal(err)
	}
	if def := purge.Flags().Lookup("wait").DefValue; def != "30s" || !strings.Contains(readme, "`cachectl purge --wait`, default 30 s") {
		t.Errorf("purge --wait defaults to %s; the README must say so", def)
	}
	for _, m := range regexp.MustCompile(`(?m)^  (\d)  (\w+)`).FindAllStringSubmatch(command.ExitCodes, -1) {
		if !strings.Contains(readme, "| "+m[1]+" | "+m[2]) {
			t.Errorf("the README's exit status table lacks %s %s", m[1], m[2])
		}
	}
}
