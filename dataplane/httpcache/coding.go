package httpcache

import (
	"mime"
	"net/http"
	"strings"
)

// Accepts reports whether a request's Accept-Encoding allows coding (RFC
// 9110 12.5.3): named, or covered by "*", with a non-zero weight. A named
// entry overrides "*"; x-gzip and x-compress name gzip and compress
// (8.4.1).
func Accepts(req http.Header, coding string) bool {
	coding = codingName(coding)
	named, star := -1, -1
	for _, v := range req.Values("Accept-Encoding") {
		for item := range strings.SplitSeq(v, ",") {
			switch name, q := codingWeight(item); name {
			case coding:
				named = max(named, q)
			case "*":
				star = max(star, q)
			}
		}
	}
	if named >= 0 {
		return named > 0
	}
	return star > 0
}

// codingWeight reads one Accept-Encoding item: its coding as codingName
// has it ("" for none) and its weight in thousandths (an invalid weight
// accepts nothing).
func codingWeight(item string) (string, int) {
	name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
	q := 1000
	for p := range strings.SplitSeq(params, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
			w, valid := qvalue(strings.TrimSpace(val))
			q = w
			if !valid {
				q = 0
			}
		}
	}
	return codingName(name), q
}

// codingName is a content coding's name in one form: lower case, x-gzip
// as gzip and x-compress as compress (RFC 9110 8.4.1.1, 8.4.1.3).
func codingName(c string) string {
	c = strings.ToLower(strings.TrimSpace(c))
	switch c {
	case "x-gzip":
		return "gzip"
	case "x-compress":
		return "compress"
	}
	return c
}

// Identity reports whether a Content-Encoding value codes nothing.
func Identity(ce string) bool {
	ce = strings.TrimSpace(ce)
	return ce == "" || strings.EqualFold(ce, "identity")
}

// ContentCoding is a header's Content-Encoding as one list: the codings
// of all its field lines, in the order applied (RFC 9110 5.3, 8.4), so
// that a coding on a second line is not missed.
func ContentCoding(h http.Header) string {
	return strings.Join(h.Values("Content-Encoding"), ", ")
}

// Coded reports whether a header's Content-Encoding, on any of its
// lines, names a coding other than identity.
func Coded(h http.Header) bool {
	for c := range strings.SplitSeq(ContentCoding(h), ",") {
		if !Identity(c) {
			return true
		}
	}
	return false
}

// AcceptsAll reports whether a request's Accept-Encoding allows every
// coding a response's Content-Encoding lists (identity always).
func AcceptsAll(req http.Header, ce string) bool {
	for c := range strings.SplitSeq(ce, ",") {
		if !Identity(c) && !Accepts(req, c) {
			return false
		}
	}
	return true
}

// AddVary adds field to the Vary header unless it is there already.
func AddVary(h http.Header, field string) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, field) {
				return
			}
		}
	}
	h.Add("Vary", field)
}

// WeakenETag makes a strong ETag weak: a coded or decoded body is not
// byte-for-byte the representation the origin tagged (RFC 9110 8.8.1).
func WeakenETag(h http.Header) {
	if et := h.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		h.Set("ETag", "W/"+et)
	}
}

// KeepsItsBytes reports whether content with header h reaches clients as
// the origin coded it: marked no-transform (RFC 9110 7.7), or carrying a
// digest of its bytes as sent (RFC 9530), which coding would falsify. A
// 304 may bring either to a body stored coded.
func KeepsItsBytes(h http.Header) bool {
	if NoTransform(h) {
		return true
	}
	for _, f := range digestFields {
		if _, ok := h[f]; ok {
			return true
		}
	}
	return false
}

// NoTransform reports whether h's Cache-Control has no-transform: no
// coding may be added to a response's content (RFC 9110 7.7), and a
// request asks for none (RFC 9111 5.2.1.6).
func NoTransform(h http.Header) bool {
	for _, v := range h.Values("Cache-Control") {
		if strings.Contains(strings.ToLower(v), "no-transform") {
			return true
		}
	}
	return false
}

// MinCompress is the smallest body worth compressing.
const MinCompress = 1024

// digestFields are the fields whose digest covers the content after its
// content coding: Content-Digest and Repr-Digest (RFC 9530 2, 3),
// Content-MD5 and Digest before them.
var digestFields = []string{"Content-Digest", "Repr-Digest", "Content-Md5", "Digest"}

// personal reports whether a response is one user's: private, or stored
// per user (Vary naming Cookie or Authorization). Such a page may hold
// the user's secret beside text from the request (a search echoed), and
// coded, its length would tell whether a guess of the secret repeats it
// (BREACH); an origin that sends it uncoded is not overruled.
func personal(h http.Header) bool {
	for _, f := range VaryFields(h) {
		if f == "cookie" || f == "authorization" {
			return true
		}
	}
	return ParseCacheControl(h).Has("private")
}

// Compressible reports whether a response is worth storing compressed: a
// textual type, not already coded, not marked no-transform (RFC 9110 7.7),
// not one user's (personal), without a digest of its bytes, and not known
// to be tiny.
func Compressible(h http.Header, length int64) bool {
	if length >= 0 && length < MinCompress {
		return false
	}
	if Coded(h) {
		return false
	}
	if KeepsItsBytes(h) {
		return false
	}
	if personal(h) {
		return false
	}
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/javascript", "application/x-javascript", "application/ecmascript",
		"application/xml", "application/xhtml+xml", "image/svg+xml", "application/wasm",
		"application/x-ndjson", "application/graphql-response+json", "font/ttf", "font/otf":
		return true
	}
	return false
}
