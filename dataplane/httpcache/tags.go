package httpcache

import (
	"net/http"
	"strings"
)

// EntryTags calls fn for each tag of a response (a stored one, or a
// PURGE request's): Surrogate-Key values separated by spaces, Cache-Tag
// values by commas; it stops, and reports true, once fn does.
func EntryTags(h http.Header, fn func(tag string) bool) bool {
	for _, v := range h.Values("Surrogate-Key") {
		for t := range strings.FieldsSeq(v) {
			if fn(t) {
				return true
			}
		}
	}
	for _, v := range h.Values("Cache-Tag") {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" && fn(t) {
				return true
			}
		}
	}
	return false
}
