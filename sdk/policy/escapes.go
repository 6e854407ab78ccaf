package policy

import "net/url"

// NormalEscapes is s (a path or a query as sent) in the one spelling of
// its escapes RFC 3986 6.2.2 makes equal: the hex of a %XX in upper case,
// and an unreserved character (letters, digits, "-._~") never escaped.
// A byte outside ASCII, which a URI may not hold, is escaped (RFC 3987
// 3.1, as browsers send it). /%7Euser and /~user, /caf%c3%a9, /caf%C3%A9
// and /café are then one key, which a purge of any spelling reaches. s is
// returned as it is when it holds no escape and no such byte.
func NormalEscapes(s string) string {
	i := 0
	for i < len(s) && s[i] != '%' && s[i] < 0x80 {
		i++
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
			continue
		}
		if c != '%' || i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			b = append(b, c)
			continue
		}
		v := byte(unhex(s[i+1])<<4 | unhex(s[i+2]))
		if 'a' <= v && v <= 'z' || 'A' <= v && v <= 'Z' || '0' <= v && v <= '9' || v == '-' || v == '.' || v == '_' || v == '~' {
			b = append(b, v)
		} else {
			b = append(b, '%', upperHex[v>>4], upperHex[v&15])
		}
		i += 2
	}
	return string(b)
}

// NormalPath spells u's path as a node keys it on arrival: the escapes
// of its raw path (as sent) in their one spelling (NormalEscapes), so
// that the raw path is kept, and an escape that is no unreserved
// character (%2F) with it, where it holds a byte outside ASCII, which
// url.URL.EscapedPath would otherwise drop it for. A URL purge of a path
// as a client sent it reaches what the node stored for it.
func NormalPath(u *url.URL) {
	raw := u.RawPath
	if raw == "" {
		return
	}
	if n := NormalEscapes(raw); n != raw {
		u.RawPath = n
		if n == (&url.URL{Path: u.Path}).EscapedPath() {
			u.RawPath = ""
		}
	}
}

// NormalURL spells u's path and query as a node keys them on arrival:
// NormalPath, and the query's escapes in their one spelling, its bytes
// outside ASCII escaped. The key, the origin, a purge, /inspect and an
// invalidation then see one URL for every spelling.
func NormalURL(u *url.URL) {
	NormalPath(u)
	u.RawQuery = NormalEscapes(u.RawQuery)
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
