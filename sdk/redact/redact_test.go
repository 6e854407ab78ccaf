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

func TestQueryAndTextRedactCredentialParameters(t *testing.T) {
	if got := Query("/a?x=1&token=t0k&X-Amz-Signature=s1g"); got != "/a?x=1&token=REDACTED&X-Amz-Signature=REDACTED" {
		t.Errorf("Query: %q", got)
	}
	got := Text(`Get "http://o/a?code=c0de&page=2": dial tcp: refused; see https://x/?sig=s1g&y`)
	if strings.Contains(got, "c0de") || strings.Contains(got, "s1g") || !strings.Contains(got, "page=2") {
		t.Errorf("Text: %q", got)
	}
}
