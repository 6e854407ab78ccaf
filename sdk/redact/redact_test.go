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

func TestSecretKnowsCredentialNamesAndSparesTheRest(t *testing.T) {
	for _, name := range []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "X-Goog-Api-Key",
		"Ocp-Apim-Subscription-Key", "X-Functions-Key", "X-Auth-Token", "X-Amz-Security-Token", "private_token", "client_secret",
		"oauth_signature", "auth_key", "apiKey", "X-Amz-Credential", "sessionid", "key", "sig", "passwd"} {
		if !Secret(name) {
			t.Errorf("Secret(%q) = false", name)
		}
	}
	for _, name := range []string{"page", "keyword", "monkey", "author", "Accept", "User-Agent", "X-Request-Id", "Content-Type", "sort"} {
		if Secret(name) {
			t.Errorf("Secret(%q) = true", name)
		}
	}
}

func TestPrintableEscapesWhatIsNotPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"Mozilla/5.0 (X11; Linux x86_64)": "Mozilla/5.0 (X11; Linux x86_64)",
		"café 日本語":                        "café 日本語",
		"a\u0085b\u2028c":                 `a\u0085b\u2028c`,
		"\u009b2J\u202eexe":               `\u009b2J\u202eexe`,
		"tab\there":                       `tab\u0009here`,
		"bad\xffbyte":                     `bad\xffbyte`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
