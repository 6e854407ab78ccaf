package httpcache

import (
	"net/http"
	"strings"
)

// NotModified reports whether a GET or HEAD with this header, for a stored
// response of status with header stored, is answered 304 (RFC 9111 4.3.2):
// If-None-Match by weak comparison, else If-Modified-Since against
// Last-Modified.
func NotModified(method string, req http.Header, status int, stored http.Header) bool {
	if status != http.StatusOK || method != http.MethodGet && method != http.MethodHead {
		return false
	}
	if inm := req.Values("If-None-Match"); len(inm) > 0 {
		etag := strings.TrimPrefix(stored.Get("Etag"), "W/")
		if etag == "" {
			return false
		}
		for _, v := range inm {
			for t := range strings.SplitSeq(v, ",") {
				t = strings.TrimSpace(t)
				if t == "*" || strings.TrimPrefix(t, "W/") == etag {
					return true // weak comparison
				}
			}
		}
		return false
	}
	v := req.Get("If-Modified-Since")
	if v == "" {
		return false // the usual request: no date to parse
	}
	ims, ok := ParseDate(v)
	if !ok {
		return false
	}
	// Without Last-Modified, the stored response's Date stands in for it
	// (RFC 9111 4.3.2).
	lm, ok := ParseDate(stored.Get("Last-Modified"))
	if !ok && stored.Get("Last-Modified") == "" {
		lm, ok = ParseDate(stored.Get("Date"))
	}
	return ok && !lm.After(ims)
}

// ConditionalFields make a request conditional or partial: a fill, which
// brings the whole object for every later client, sends none of a client's.
var ConditionalFields = []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range"}
