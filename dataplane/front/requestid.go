package front

import (
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
)

// Request ids. Every client request has one (X-Request-Id): the one a
// trusted proxy sent, or a PURGE's own (the id its purge is recorded
// under), else one the node assigns. It goes on with the request (to the
// owner over the peer hop, and to the origin), comes back on the answer,
// and is in the access log, the log streams and the trace.

// requestIDs assigns ids unique to a node's run: a random prefix, drawn
// when the node starts, and a count.
type requestIDs struct {
	prefix [8]byte
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [4]byte
	rand.Read(b[:])
	g := &requestIDs{}
	hex.Encode(g.prefix[:], b[:])
	return g
}

// idLen is the length of the ids the node assigns.
const idLen = 21

// put writes a new id into b: the prefix, a dash, the count in 12 hex
// digits (it wraps after 2^48 requests).
func (g *requestIDs) put(b *[idLen]byte) {
	const digits = "0123456789abcdef"
	copy(b[:], g.prefix[:])
	b[8] = '-'
	n := g.n.Add(1)
	for i := len(b) - 1; i > 8; i-- {
		b[i] = digits[n&15]
		n >>= 4
	}
}

// maxRequestID bounds a request id taken from a request.
const maxRequestID = 128

// validRequestID reports whether id may be taken from a request as its
// id: 1 to maxRequestID letters, digits and ._:- starting with a letter or
// digit, as the control plane takes a purge's id.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != ':' && c != '-') {
			return false
		}
	}
	return true
}
