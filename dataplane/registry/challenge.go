package registry

import (
	"fmt"
	"net/url"
	"strings"
)

// challenge is an upstream's WWW-Authenticate (RFC 9110 11.6.1) as the
// distribution token spec uses it: Bearer with realm, service and scope,
// or Basic.
type challenge struct {
	scheme string // "bearer" or "basic"
	realm  *url.URL
	params map[string]string
}

// maxChallengeBytes bounds a WWW-Authenticate read.
const maxChallengeBytes = 4 << 10

// parseChallenge reads the first Bearer or Basic challenge of the
// WWW-Authenticate values vs. A Bearer challenge needs an absolute
// http(s) realm.
func parseChallenge(vs []string) (*challenge, error) {
	v := strings.Join(vs, ", ")
	if v == "" {
		return nil, fmt.Errorf("%w: a 401 without WWW-Authenticate", ErrChallenge)
	}
	if len(v) > maxChallengeBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrChallenge, maxChallengeBytes)
	}
	scheme, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	c := &challenge{scheme: strings.ToLower(scheme), params: map[string]string{}}
	if c.scheme != "bearer" && c.scheme != "basic" {
		return nil, fmt.Errorf("%w: scheme %q (want Bearer or Basic)", ErrChallenge, scheme)
	}
	for s := strings.TrimSpace(rest); s != ""; {
		k, after, ok := strings.Cut(s, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" || strings.ContainsAny(k, " \t\",") {
			return nil, fmt.Errorf("%w: %q is no auth-param (name=value)", ErrChallenge, s)
		}
		val, tail, err := paramValue(strings.TrimLeft(after, " \t"))
		if err != nil {
			return nil, err
		}
		c.params[k] = val
		tail = strings.TrimLeft(tail, " \t")
		if tail != "" && tail[0] != ',' {
			break // the next challenge: only the first is read
		}
		s = strings.TrimLeft(strings.TrimPrefix(tail, ","), " \t")
	}
	if c.scheme == "basic" {
		return c, nil
	}
	realm, err := url.Parse(c.params["realm"])
	if err != nil || (realm.Scheme != "http" && realm.Scheme != "https") || realm.Host == "" {
		return nil, fmt.Errorf("%w: realm %q is not an http(s) URL", ErrChallenge, c.params["realm"])
	}
	c.realm = realm
	return c, nil
}

// paramValue reads a token or a quoted string from the start of s.
func paramValue(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		i := strings.IndexAny(s, ", \t")
		if i < 0 {
			return s, "", nil
		}
		return s[:i], s[i:], nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("%w: an unterminated quoted value", ErrChallenge)
}
