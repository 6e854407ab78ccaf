package httpcache

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// A response that varies (RFC 9111 4.1) is stored under a variant key: the
// URL's key, varySep, and the request's normalised values of the fields
// its Vary names.
const varySep = "\x1fvary\x1f"

// VaryFields are the lower-cased, sorted field names of h's Vary.
func VaryFields(h http.Header) []string {
	var fields []string
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.ToLower(strings.TrimSpace(f)); f != "" && !slices.Contains(fields, f) {
				fields = append(fields, f)
			}
		}
	}
	slices.Sort(fields)
	return fields
}

// VariantKey is key extended with the request's normalised values of the
// fields (RFC 9111 4.1 allows normalising them).
func VariantKey(key string, fields []string, h http.Header) string {
	var b strings.Builder
	b.WriteString(VariantPrefix(key))
	for _, f := range fields {
		b.WriteString(f)
		b.WriteByte('=')
		b.WriteString(varyValue(f, h))
		b.WriteByte('\x1e')
	}
	return b.String()
}

// VariantPrefix starts the key of every variant stored for key.
func VariantPrefix(key string) string { return key + varySep }

// URLKey is the key a variant key extends (a key that is none, itself).
func URLKey(k string) string {
	base, _, _ := strings.Cut(k, varySep)
	return base
}

// varyValue normalises the request's value of a Vary field: lines joined,
// spaces around commas dropped; Accept-Encoding reduced to the codings it
// accepts, sorted.
func varyValue(field string, h http.Header) string {
	vals := h.Values(textproto.CanonicalMIMEHeaderKey(field))
	if field == "accept-encoding" {
		var acc []string
		for _, c := range []string{"br", "deflate", "gzip", "zstd"} {
			if Accepts(h, c) {
				acc = append(acc, c)
			}
		}
		return strings.Join(acc, ",")
	}
	parts := make([]string, 0, len(vals))
	for _, v := range vals {
		for p := range strings.SplitSeq(v, ",") {
			parts = append(parts, strings.TrimSpace(p))
		}
	}
	return strings.Join(parts, ",")
}

// SameVariant reports whether two requests select the same variant.
func SameVariant(fields []string, a, b http.Header) bool {
	for _, f := range fields {
		if varyValue(f, a) != varyValue(f, b) {
			return false
		}
	}
	return true
}
