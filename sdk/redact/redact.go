// Package redact hides secrets in what a process shows of itself: its
// command line (pprof's /debug/pprof/cmdline) and URLs in logs.
package redact

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
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
