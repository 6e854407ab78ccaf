package httpcache

import (
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
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

// VariantOf returns the URL key that variant key k extends, and false for
// a key that is no variant's: the store groups a URL's variants by it.
func VariantOf(k string) (string, bool) {
	base, _, ok := strings.Cut(k, varySep)
	return base, ok
}

// URLKey is the key a variant key extends (a key that is none, itself).
func URLKey(k string) string {
	base, _, _ := strings.Cut(k, varySep)
	return base
}

// varyValue normalises the request's value of a Vary field: lines joined,
// spaces around commas dropped; Accept-Encoding reduced to the codings it
// accepts, sorted; Accept-Language as normalLanguages has it, Accept as
// normalMediaRanges.
func varyValue(field string, h http.Header) string {
	vals := h.Values(textproto.CanonicalMIMEHeaderKey(field))
	if field == "accept-encoding" {
		return normalCodings(vals)
	}
	if field == "accept-language" {
		return normalLanguages(vals)
	}
	if field == "accept" {
		return normalMediaRanges(vals)
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

// normalMediaRanges is an Accept value (RFC 9110 12.5.1) in one form for
// every request that asks the same: its media ranges as listed (the lines
// of the field joined), each without spaces, its type, subtype and
// parameter names lower-cased (they are case-insensitive, 8.3.1; parameter
// values are kept as sent), a weight written in thousandths, repeats
// dropped, and ranked by weight, highest first, ranges of equal weight in
// the client's order: a negotiator may take the first of those.
// "text/html, application/json" and "application/json, text/html" are two
// variants.
func normalMediaRanges(vals []string) string {
	type mediaRange struct {
		r string
		q int
	}
	var ranges []mediaRange
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ",") {
			mr, params, _ := strings.Cut(strings.Join(strings.Fields(part), ""), ";")
			if mr == "" {
				continue
			}
			out, q := strings.ToLower(mr), 1000
			for param := range strings.SplitSeq(params, ";") {
				name, val, _ := strings.Cut(param, "=")
				if name = strings.ToLower(name); name == "" {
					continue
				}
				if name == "q" {
					if w, ok := qvalue(val); ok {
						q = w
						continue
					}
				}
				out += ";" + name + "=" + val
			}
			if !slices.ContainsFunc(ranges, func(m mediaRange) bool { return m.r == out }) {
				ranges = append(ranges, mediaRange{out, q})
			}
		}
	}
	slices.SortStableFunc(ranges, func(a, b mediaRange) int { return b.q - a.q })
	var b strings.Builder
	for i, m := range ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.r)
		if m.q < 1000 {
			b.WriteString(";q=")
			b.WriteString(strconv.Itoa(m.q))
		}
	}
	return b.String()
}

// normalCodings is an Accept-Encoding value (RFC 9110 12.5.3) as the set
// of what it accepts: the codings named with a non-zero weight, x-gzip
// and x-compress as gzip and compress (8.4.1), sorted; "*" when it
// accepts any other; "-c" for a coding it names with weight 0. Codings
// the node does not know keep a variant of their own: an origin may
// answer them.
func normalCodings(vals []string) string {
	var named []string
	star := -1
	for _, v := range vals {
		for item := range strings.SplitSeq(v, ",") {
			switch name, q := codingWeight(item); {
			case name == "":
			case name == "*":
				star = max(star, q)
			case q > 0:
				named = append(named, name)
			default:
				named = append(named, "-"+name)
			}
		}
	}
	switch {
	case star > 0:
		named = append(named, "*")
	case star == 0:
		named = append(named, "-*")
	}
	slices.Sort(named)
	named = slices.Compact(named)
	return strings.Join(named, ",")
}

// maxLanguages bounds the language ranges a variant key keeps.
const maxLanguages = 16

// normalLanguages is an Accept-Language value (RFC 9110 12.5.4) in one
// form for every request that asks the same: ranges lower-cased, those
// of weight 0 and malformed ones dropped, by weight (highest first) and,
// at equal weight, in alphabetical order; at most maxLanguages of them.
// "en-US, fr;q=0.5" and "fr ; q=0.50,EN-us" select the same variant.
func normalLanguages(vals []string) string {
	type lang struct {
		tag string
		q   int // thousandths
	}
	var langs []lang
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ",") {
			tag, params, _ := strings.Cut(part, ";")
			tag = strings.ToLower(strings.TrimSpace(tag))
			if tag == "" || strings.ContainsAny(tag, " \t\"=") {
				continue
			}
			q, ok := 1000, true
			for param := range strings.SplitSeq(params, ";") {
				name, val, _ := strings.Cut(strings.TrimSpace(param), "=")
				if strings.EqualFold(strings.TrimSpace(name), "q") {
					q, ok = qvalue(strings.TrimSpace(val))
				}
			}
			if ok && q > 0 && len(langs) < maxLanguages && !slices.ContainsFunc(langs, func(l lang) bool { return l.tag == tag }) {
				langs = append(langs, lang{tag, q})
			}
		}
	}
	slices.SortFunc(langs, func(a, b lang) int {
		if a.q != b.q {
			return b.q - a.q
		}
		return strings.Compare(a.tag, b.tag)
	})
	out := make([]string, len(langs))
	for i, l := range langs {
		out[i] = l.tag
		if l.q < 1000 {
			out[i] += ";q=" + strconv.Itoa(l.q)
		}
	}
	return strings.Join(out, ",")
}

// PreferredLanguage returns the one language range h's Accept-Language
// weighs highest, when a single range does (not "*"): a stored variant whose
// Content-Language is exactly that range may answer the request.
func PreferredLanguage(h http.Header) (string, bool) {
	norm := normalLanguages(h.Values("Accept-Language"))
	if norm == "" {
		return "", false
	}
	first, rest, _ := strings.Cut(norm, ",")
	top, _, weighted := strings.Cut(first, ";q=")
	if next, _, _ := strings.Cut(rest, ","); next != "" {
		// normalLanguages sorts by weight: a tie for the top is no preference.
		_, nq, nw := strings.Cut(next, ";q=")
		_, fq, _ := strings.Cut(first, ";q=")
		if nw == weighted && nq == fq {
			return "", false
		}
	}
	if top == "*" {
		return "", false
	}
	return top, true
}

// qvalue parses a weight (RFC 9110 12.4.2): 0 to 1 with up to three
// decimals, in thousandths.
func qvalue(v string) (int, bool) {
	whole, frac, dot := strings.Cut(v, ".")
	if whole != "0" && whole != "1" || dot && len(frac) > 3 {
		return 0, false
	}
	n := 0
	for i := 0; i < 3; i++ {
		n *= 10
		if i < len(frac) {
			if frac[i] < '0' || frac[i] > '9' {
				return 0, false
			}
			n += int(frac[i] - '0')
		}
	}
	if whole == "1" {
		if n != 0 {
			return 0, false
		}
		return 1000, true
	}
	return n, true
}
