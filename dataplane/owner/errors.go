package owner

import "errors"

// The package's errors, in one place. None reaches a client as text: each
// decides what the client is answered where it is returned.
var (
	// errNotSliceable: the object has no validator to keep its slices
	// consistent; it is kept whole instead.
	errNotSliceable = errors.New("owner: object without validator")
)
