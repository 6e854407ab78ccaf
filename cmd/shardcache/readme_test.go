package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's production command for a node uses flags the node has,
// with the ops port everything else uses, and the admin token the
// operators' views need.
func TestREADMENodeCommand(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(b), "shardcache node --id")
	if start < 0 {
		t.Fatal("no shardcache node command in the README")
	}
	cmdline := string(b[start:])
	cmdline = cmdline[:strings.Index(cmdline, "\ncachectl")]
	node, _, err := newRootCommand().Find([]string{"node"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`--([a-z-]+)`).FindAllStringSubmatch(cmdline, -1) {
		if node.Flags().Lookup(m[1]) == nil {
			t.Errorf("the README's node command has --%s, which shardcache node does not", m[1])
		}
	}
	for _, want := range []string{"--ops 0.0.0.0:9191", "--admin-token-file "} {
		if !strings.Contains(cmdline, want) {
			t.Errorf("the README's node command lacks %q:\n%s", want, cmdline)
		}
	}
}
