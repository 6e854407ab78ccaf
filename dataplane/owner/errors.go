package owner

import (
	"errors"

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
// URL in it (an origin request's ?token=) REDACTED, as keys are.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return redact.Text(err.Error())
}
