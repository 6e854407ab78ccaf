package owner

import (
	"errors"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/sdk/redact"
)

// The package's errors, in one place. None reaches a client as text: each
// decides what the client is answered where it is returned.
var (
	// errNotSliceable: the object has no validator to keep its slices
	// consistent; it is kept whole instead.
	errNotSliceable = errors.New("owner: object without validator")
)

// errText is err's message as a log line shows it: the credentials of any
// URL in it (an origin request's ?token=) REDACTED, as keys are, and what
// is not printable escaped (it may quote the key's Host).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return redact.Printable(redact.Text(err.Error()))
}

// keyText is a key as a log line shows it: its query's credentials
// REDACTED, and what the client sent that is not printable (a Host, a
// field a policy keys on) escaped.
func keyText(key string) string { return redact.Printable(redact.Query(key)) }

// keyShown is keyText of key as the request's policy shows it
// (Policy.ShownKey): the cookie and credential values it is keyed on
// REDACTED too.
func (s *serving) keyShown(key string) string {
	if s.p == nil || s.r == nil {
		return keyText(key)
	}
	return keyText(s.p.ShownKey(hop.Scheme(s.r), s.r, key))
}
