package dataplane

import (
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// decoders decode stored zstd bodies for clients that do not accept zstd.
// One goroutine each (concurrency 1) and low memory: a decode runs per
// request.
var decoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(err) // the options are constant
	}
	return d
}}

// minCompress is the smallest body worth compressing.
const minCompress = 1024

// compressible reports whether a response is worth storing compressed: a
// textual type, not already coded, not marked no-transform (RFC 9110 7.7),
// and not known to be tiny.
func compressible(h http.Header, length int64) bool {
	if length >= 0 && length < minCompress {
		return false
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return false
	}
	for _, v := range h.Values("Cache-Control") {
		if strings.Contains(strings.ToLower(v), "no-transform") {
			return false
		}
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

// accepts reports whether r's Accept-Encoding allows coding (RFC 9110
// 12.5.3): named, or covered by "*", with a non-zero weight. A named entry
// overrides "*".
func accepts(r *http.Request, coding string) bool {
	named, star := -1.0, -1.0
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, item := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
			name = strings.TrimSpace(name)
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && f >= 0 && f <= 1 {
						q = f
					} else {
						q = 0 // an invalid weight accepts nothing
					}
				}
			}
			switch {
			case strings.EqualFold(name, coding):
				named = max(named, q)
			case name == "*":
				star = max(star, q)
			}
		}
	}
	if named >= 0 {
		return named > 0
	}
	return star > 0
}

// addVary adds field to the Vary header unless it is there already.
func addVary(h http.Header, field string) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, field) {
				return
			}
		}
	}
	h.Add("Vary", field)
}

// weakenETag makes a strong ETag weak: a coded or decoded body is not
// byte-for-byte the representation the origin tagged (RFC 9110 8.8.1).
func weakenETag(h http.Header) {
	if et := h.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		h.Set("ETag", "W/"+et)
	}
}
