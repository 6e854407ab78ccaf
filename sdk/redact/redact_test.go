package redact

import (
	"slices"
	"strings"
	"testing"
)

func TestRedactArgsHidesSecretFlagValues(t *testing.T) {
	got := Args([]string{"shardcache", "node", "--admin-token", "a1", "--join-token=j1", "--ca-key", "k.pem",
		"--join-token-file", "/run/secrets/join", "--id", "node-1", "-token", "t1"})
	want := []string{"shardcache", "node", "--admin-token", "REDACTED", "--join-token=REDACTED", "--ca-key", "k.pem",
		"--join-token-file", "/run/secrets/join", "--id", "node-1", "-token", "REDACTED"}
	if !slices.Equal(got, want) {
		t.Fatalf("Args:\n got %v\nwant %v", got, want)
	}
	if strings.Contains(strings.Join(got, " "), "j1") {
		t.Fatal("a secret survived")
	}
}
