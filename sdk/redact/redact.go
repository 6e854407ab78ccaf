// Package redact hides secrets in what a process shows of itself: its
// command line (pprof's /debug/pprof/cmdline) and URLs in logs; and keeps
// what clients sent from breaking or disguising the lines it is shown in.
package redact

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Args is the command line with the value of every flag that names
// a secret (a token, password or secret) replaced; file paths are kept.
func Args(args []string) []string {
	out := make([]string, len(args))
	secret := func(flag string) bool {
		flag = strings.ToLower(strings.TrimLeft(flag, "-"))
		if strings.HasSuffix(flag, "-file") {
			return false // a path, not the secret
		}
		for _, w := range []string{"token", "password", "secret"} {
			if strings.Contains(flag, w) {
				return true
			}
		}
		return false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		out[i] = URL(a)
		if !strings.HasPrefix(a, "-") {
			continue
		}
		if name, v, ok := strings.Cut(a, "="); ok {
			out[i] = name + "=" + URL(v)
			if secret(name) {
				out[i] = name + "=REDACTED"
			}
			continue
		}
		if secret(a) && i+1 < len(args) {
			i++
			out[i] = "REDACTED"
		}
	}
	return out
}

// URL is s with the password of a URL in it replaced ("xxxxx"), for
// logs and the command line; anything else as it is.
func URL(s string) string {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
}

// Cmdline serves the process's command line as pprof's /debug/pprof/cmdline
// does (arguments separated by NUL), its secrets redacted.
func Cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(Args(os.Args), "\x00"))
}

// secretNames are field and parameter names (lower case) whose values are
// credentials: signed URLs, API keys, tokens, however short. Their values
// are never written to a log, a log stream or an operator's view.
var secretNames = map[string]bool{"auth": true, "authorization": true, "proxy-authorization": true, "key": true,
	"sig": true, "jwt": true, "code": true, "pass": true, "pwd": true, "cookie": true, "set-cookie": true}

// secretWords are parts of a name that make it a credential's, whatever
// else it says: X-Auth-Token, private_token, client_secret,
// X-Amz-Credential, oauth_signature, X-Api-Key, sessionid.
var secretWords = []string{"token", "secret", "passw", "signature", "credential", "apikey", "api-key", "api_key", "session", "cookie"}

// Secret reports whether a header field or query parameter named name (in
// any case) carries a credential: one of secretNames, a name holding one
// of secretWords, or a name ending in a separate "key" (X-Goog-Api-Key,
// Ocp-Apim-Subscription-Key, X-Functions-Key, auth_key), as API gateways
// name their keys.
func Secret(name string) bool {
	n := strings.ToLower(name)
	if secretNames[n] {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return strings.HasSuffix(n, "-key") || strings.HasSuffix(n, "_key") || strings.HasSuffix(n, ".key")
}

// secretParam reports whether name, as a query spells it, is a
// credential's (Secret).
func secretParam(name string) bool {
	n, err := url.QueryUnescape(name)
	return err == nil && Secret(n)
}

// Query is s, a request URI, a URL or a cache key holding one, with the
// values of the credential parameters of its query replaced by REDACTED.
func Query(s string) string {
	path, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	parts := strings.Split(query, "&")
	changed := false
	for i, part := range parts {
		name, _, hasValue := strings.Cut(part, "=")
		if hasValue && secretParam(name) {
			parts[i], changed = name+"=REDACTED", true
		}
	}
	if !changed {
		return s
	}
	return path + "?" + strings.Join(parts, "&")
}

// queryParam is a query parameter inside free text: after ? or &, up to
// the next &, space, quote or the text's end.
var queryParam = regexp.MustCompile(`([?&])([^=&?\s"'#]+)=([^&\s"'#]*)`)

// Text is s, free text (an error message quoting URLs), with the values of
// the credential parameters of every URL in it replaced by REDACTED.
func Text(s string) string {
	if !strings.Contains(s, "?") {
		return s
	}
	return queryParam.ReplaceAllStringFunc(s, func(m string) string {
		if name, _, _ := strings.Cut(m[1:], "="); secretParam(name) {
			return m[:1] + name + "=REDACTED"
		}
		return m
	})
}

// Printable is s, text a client sent, as logs and views show it: every
// character that is not printable (unicode.IsPrint: the C0 and C1
// controls, U+2028 and other separators, bidirectional overrides) escaped
// as \uXXXX, and a byte that is not UTF-8 as \xHH. A node's client port
// refuses ASCII controls, not these: NEL and U+2028 are line breaks to log
// pipelines that split by Unicode rules, and a C1 CSI or an override
// rewrites what an operator's terminal shows. Printable text, ASCII or
// not, is kept as it came.
func Printable(s string) string {
	i := 0
	for i < len(s) && s[i] >= ' ' && s[i] < utf8.RuneSelf && s[i] != 0x7f {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}
