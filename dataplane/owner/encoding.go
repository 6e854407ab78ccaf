package owner

import (
	"mime"
	"net/http"
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
