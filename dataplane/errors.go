package dataplane

import "errors"

// The package's errors, in one place. None reaches a client as text: each
// decides what the client is answered (a 416, a whole body, a broken
// transfer) where it is returned.
var (
	// errNotSliceable: the object has no validator to keep its slices
	// consistent; it is kept whole instead.
	errNotSliceable = errors.New("dataplane: object without validator")
	// errBrokenOff says a response broke off after its header was sent.
	errBrokenOff = errors.New("dataplane: the body broke off after the header was sent")
)
