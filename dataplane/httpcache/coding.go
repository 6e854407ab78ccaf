package httpcache

import (
	"net/http"
	"strconv"
	"strings"
)

// Accepts reports whether a request's Accept-Encoding allows coding (RFC
// 9110 12.5.3): named, or covered by "*", with a non-zero weight. A named
// entry overrides "*".
func Accepts(req http.Header, coding string) bool {
	named, star := -1.0, -1.0
	for _, v := range req.Values("Accept-Encoding") {
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
