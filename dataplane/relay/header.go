package relay

import (
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// checkHeader refuses a relayed request's header that one of the hop's
// classes would not carry as it is: the same for both, so that a request
// never depends on the class it happens to take. Connection-specific
// fields are the sender's to remove (RFC 9110 7.6.1; HTTP/2 forbids them,
// RFC 9113 8.2.2), and a field that is not one (a name that is no token, a
// value with CR, LF or NUL) would let a request's bytes frame another on a
// keep-alive connection.
func checkHeader(host string, h http.Header) error {
	if !httpguts.ValidHostHeader(host) {
		return fmt.Errorf("%w: Host %q", ErrHeaderInvalid, host)
	}
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("%w: field name %q", ErrHeaderInvalid, k)
		}
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade":
			return fmt.Errorf("%w: %s is connection-specific", ErrHeaderInvalid, k)
		case "Te":
			for _, v := range vs {
				if !strings.EqualFold(strings.TrimSpace(v), "trailers") {
					return fmt.Errorf("%w: TE %q (only \"trailers\" passes)", ErrHeaderInvalid, v)
				}
			}
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("%w: the value of %s", ErrHeaderInvalid, k)
			}
		}
	}
	return nil
}

// skipped reports whether a header field is left out of a written request:
// Host is written from the request, and Content-Length would announce a
// body relayed requests do not have.
func skipped(k string) bool {
	return len(k) == 4 && strings.EqualFold(k, "Host") || len(k) == 14 && strings.EqualFold(k, "Content-Length")
}
