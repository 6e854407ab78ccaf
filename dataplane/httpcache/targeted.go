package httpcache

import (
	"net/http"
	"strconv"
	"strings"
)

// Targeted cache control (RFC 9213). A targeted field has Cache-Control's
// semantics for the caches it names, as a Structured Field Dictionary (RFC
// 8941). A node obeys CDN-Cache-Control, after any fields its policy names
// (say Shardcache-Cache-Control, to address this cluster alone): the first
// of them with a valid, non-empty value replaces Cache-Control and Expires
// for storing and freshness (RFC 9213 2.2). Cache-Control itself is left as
// it is, for the caches downstream.

// CDNCacheControl is the targeted field every node obeys, canonical.
const CDNCacheControl = "Cdn-Cache-Control"

// ResponseControl returns the directives that govern a stored response
// for this cache: those of the first of the targeted fields named (then
// CDN-Cache-Control) that is valid and not empty, and targeted true; else
// Cache-Control's. targeted names are canonical header keys.
func ResponseControl(h http.Header, targeted ...string) (d Directives, fromTargeted bool) {
	for _, name := range targeted {
		if d, ok := ParseTargeted(h[name]); ok {
			return d, true
		}
	}
	if d, ok := ParseTargeted(h[CDNCacheControl]); ok {
		return d, true
	}
	return ParseCacheControl(h), false
}

// directiveTypes are the types RFC 9213 2.1 infers for the directives a
// cache acts on: delta-seconds are Integers, the others Booleans (no-cache
// and private may instead be a String of field names). A directive of
// another type makes the whole field invalid; extensions are ignored.
var directiveTypes = map[string]byte{
	"max-age": 'i', "s-maxage": 'i', "stale-while-revalidate": 'i', "stale-if-error": 'i',
	"no-store": 'b', "must-revalidate": 'b', "proxy-revalidate": 'b', "public": 'b', "immutable": 'b',
	"must-understand": 'b', "no-transform": 'b', "no-cache": 's', "private": 's',
}

// ParseTargeted parses a targeted field's lines as a Structured Field
// Dictionary into Directives; ok is false when the field is absent, empty,
// or invalid (as a Dictionary, or a known directive of the wrong type): it
// is then ignored as a whole.
func ParseTargeted(lines []string) (Directives, bool) {
	if len(lines) == 0 {
		return nil, false
	}
	p := sfParser{s: strings.Join(lines, ",")}
	members, ok := p.dictionary()
	if !ok || len(members) == 0 {
		return nil, false
	}
	d := Directives{}
	for _, m := range members {
		want, known := directiveTypes[m.key]
		switch {
		case !known:
			d[m.key] = m.value // an extension: kept, ignored by callers
			continue
		case want == 'i' && m.kind != 'i', want == 'b' && m.kind != 'b', want == 's' && m.kind != 'b' && m.kind != 's':
			return nil, false
		case m.kind == 'b' && m.value == "?0":
			continue // false: the directive is absent
		case m.kind == 'b':
			d[m.key] = ""
		default:
			d[m.key] = m.value
		}
	}
	return d, true
}

// sfMember is one Dictionary member: its key, its bare item's kind
// ('i' Integer, 'd' Decimal, 's' String, 't' Token, 'y' Byte Sequence, 'b'
// Boolean, 'l' Inner List) and value as text.
type sfMember struct {
	key, value string
	kind       byte
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// dictionary is RFC 8941 4.2.2. A later member of the same key replaces
// an earlier one, in its place order.
func (p *sfParser) dictionary() ([]sfMember, bool) {
	var out []sfMember
	p.skipSP()
	for p.i < len(p.s) {
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		m := sfMember{key: key, kind: 'b', value: "?1"}
		if p.peek() == '=' {
			p.i++
			if p.peek() == '(' {
				if !p.innerList() {
					return nil, false
				}
				m.kind, m.value = 'l', ""
			} else if m.kind, m.value, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		if !p.parameters() {
			return nil, false
		}
		replaced := false
		for j := range out {
			if out[j].key == key {
				out[j], replaced = m, true
			}
		}
		if !replaced {
			out = append(out, m)
		}
		if end, ok := p.memberEnd(); !ok {
			return nil, false
		} else if end {
			return out, true
		}
	}
	return out, true
}

// memberEnd reads what follows a List or Dictionary member: the end of
// the field (end), or a comma and the next member's start; false for
// anything else, a trailing comma among it.
func (p *sfParser) memberEnd() (end, ok bool) {
	p.skipOWS()
	if p.i == len(p.s) {
		return true, true
	}
	if p.peek() != ',' {
		return false, false
	}
	p.i++
	p.skipOWS()
	return false, p.i < len(p.s)
}

func (p *sfParser) key() (string, bool) {
	start := p.i
	c := p.peek()
	if !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], true
}

func (p *sfParser) parameters() bool {
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		if _, ok := p.key(); !ok {
			return false
		}
		if p.peek() == '=' {
			p.i++
			if _, _, ok := p.bareItem(); !ok {
				return false
			}
		}
	}
	return true
}

func (p *sfParser) innerList() bool {
	p.i++ // (
	for {
		p.skipSP()
		if p.peek() == ')' {
			p.i++
			return p.parameters()
		}
		if _, _, ok := p.bareItem(); !ok || !p.parameters() {
			return false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return false
		}
	}
}

// bareItem is RFC 8941 4.2.3.1.
func (p *sfParser) bareItem() (kind byte, value string, ok bool) {
	c := p.peek()
	switch {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		start := p.i
		p.i++
		for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
			p.i++
		}
		return 't', p.s[start:p.i], true
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return 0, "", false
		}
		for _, b := range p.s[p.i+1 : p.i+1+end] {
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '=') {
				return 0, "", false
			}
		}
		p.i += end + 2
		return 'y', "", true
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return 'b', p.s[p.i-2 : p.i], true
		}
	}
	return 0, "", false
}

func isTokenChar(c byte) bool {
	return c > ' ' && c < 0x7f && !strings.ContainsRune("\"(),;<=>?@[\\]{}", rune(c)) || c == ':' || c == '/'
}

func (p *sfParser) number() (byte, string, bool) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digitsStart, dot := p.i, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			p.i++
			continue
		}
		if c == '.' && dot < 0 {
			dot = p.i
			p.i++
			continue
		}
		break
	}
	n := p.i - digitsStart
	switch {
	case n == 0 || dot == p.i-1:
		return 0, "", false
	case dot < 0 && n <= 15:
		if _, err := strconv.ParseInt(p.s[start:p.i], 10, 64); err != nil {
			return 0, "", false
		}
		return 'i', p.s[start:p.i], true
	case dot >= 0 && dot-digitsStart <= 12 && p.i-dot-1 <= 3:
		return 'd', p.s[start:p.i], true
	}
	return 0, "", false
}

func (p *sfParser) str() (byte, string, bool) {
	p.i++ // "
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return 0, "", false
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return 's', b.String(), true
		case c < 0x20 || c > 0x7e:
			return 0, "", false
		default:
			b.WriteByte(c)
		}
	}
	return 0, "", false
}

// ListMember is one member of a Structured Field List (RFC 8941 3.1): its
// item, as text (a string unquoted), and its parameters, a Boolean true as
// "?1".
type ListMember struct {
	Item   string
	Params map[string]string
}

// ParseList parses a List whose members are bare items with parameters
// (no inner lists), as Cache-Status and Proxy-Status are; false when v is
// not one.
func ParseList(v string) ([]ListMember, bool) {
	p := sfParser{s: v}
	var out []ListMember
	p.skipSP()
	for p.i < len(p.s) {
		_, item, ok := p.bareItem()
		if !ok {
			return nil, false
		}
		m := ListMember{Item: item, Params: map[string]string{}}
		for p.peek() == ';' {
			p.i++
			p.skipSP()
			key, ok := p.key()
			if !ok {
				return nil, false
			}
			value := "?1"
			if p.peek() == '=' {
				p.i++
				if _, value, ok = p.bareItem(); !ok {
					return nil, false
				}
			}
			m.Params[key] = value
		}
		out = append(out, m)
		if end, ok := p.memberEnd(); !ok {
			return nil, false
		} else if end {
			return out, true
		}
	}
	return out, len(out) > 0
}
