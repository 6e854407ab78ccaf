// Package logquery is the small language that selects and formats log
// records, as varnishlog's -q does: a filter expression such as
//
//	status >= 500 and route == relayed and duration > 100ms
//	reason == "set-cookie" or req.User-Agent ~ "^curl/"
//	not (cache == HIT) and resp.Content-Type ~ "image/"
//
// and an output template such as "{request_id} {status} {reason} {path}".
// It is parsed by hand (no eval, no reflection), over a schema of fields
// that the caller gives, and every mistake is an error that names what is
// wrong and where. It imports nothing of shardcache.
//
// Grammar:
//
//	expr    = and { "or" and }
//	and     = unary { "and" unary }
//	unary   = "not" unary | "(" expr ")" | compare
//	compare = operand op value
//	operand = field | "req." header-name | "resp." header-name
//	op      = "==" | "!=" | "<" | "<=" | ">" | ">=" | "~" | "!~"
//	value   = "quoted string" | number | duration (100ms, 1.5s) | word
//
// Text (a text field, a header) compares with == and != exactly, and
// with ~ and !~ against a regular expression (RE2: linear in the text);
// numbers and durations compare with every operator but ~ and !~. A
// header is compared as its first value, "" when there is none.
package logquery

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is a field's type.
type Kind int

const (
	Text     Kind = iota // compared exactly or by a regular expression
	Number               // a count: status, bytes
	Duration             // a time, written with a unit (100ms, 2s)
)

func (k Kind) String() string { return [...]string{"text", "a number", "a duration"}[k] }

// Field is one field of the schema: its kind, and whether only full
// records carry it (a full log stream is needed for it to be non-zero).
type Field struct {
	Kind Kind
	Full bool
}

// Record is what a query reads of a log record: a text field's value, a
// number field's (a duration's in milliseconds), and a request (or, with
// response set, answer) header field's first value.
type Record interface {
	Text(field string) string
	Number(field string) float64
	Header(response bool, name string) string
}

// Bounds of a query: its length, its comparisons, its nesting, and the
// length of a regular expression.
const (
	MaxLength      = 1024
	MaxComparisons = 32
	MaxDepth       = 16
	MaxRegexp      = 256
)

// ErrSyntax is what every parse error matches.
var ErrSyntax = errors.New("logquery")

// Query is a parsed filter expression.
type Query struct {
	root node
	full bool
}

// Match reports whether r passes q. A nil Query passes everything.
func (q *Query) Match(r Record) bool { return q == nil || q.root.eval(r) }

// Full reports whether q reads what only full records carry (a header,
// or a field of the schema marked Full).
func (q *Query) Full() bool { return q != nil && q.full }

// Parse parses a filter expression over fields (names are lower case);
// "" is no filter (a nil Query).
func Parse(src string, fields map[string]Field) (*Query, error) {
	if strings.TrimSpace(src) == "" {
		return nil, nil
	}
	if len(src) > MaxLength {
		return nil, fmt.Errorf("%w: the filter is %d bytes long; at most %d", ErrSyntax, len(src), MaxLength)
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, fields: fields, src: src}
	root, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEnd {
		return nil, p.errAt(t, "unexpected %s: want and, or, or the end of the filter", t.describe())
	}
	return &Query{root: root, full: p.full}, nil
}

// node is a parsed expression.
type node interface{ eval(Record) bool }

type andNode struct{ l, r node }
type orNode struct{ l, r node }
type notNode struct{ n node }

func (n andNode) eval(r Record) bool { return n.l.eval(r) && n.r.eval(r) }
func (n orNode) eval(r Record) bool  { return n.l.eval(r) || n.r.eval(r) }
func (n notNode) eval(r Record) bool { return !n.n.eval(r) }

// operand is what a comparison reads: a field, or a header.
type operand struct {
	field    string
	kind     Kind
	header   bool
	response bool // resp.NAME, else req.NAME
}

func (o operand) text(r Record) string {
	if o.header {
		return r.Header(o.response, o.field)
	}
	return r.Text(o.field)
}

type textCompare struct {
	o   operand
	op  string
	val string
	re  *regexp.Regexp
}

func (c textCompare) eval(r Record) bool {
	v := c.o.text(r)
	switch c.op {
	case "==":
		return v == c.val
	case "!=":
		return v != c.val
	case "~":
		return c.re.MatchString(v)
	default: // !~
		return !c.re.MatchString(v)
	}
}

type numberCompare struct {
	field string
	op    string
	val   float64
}

func (c numberCompare) eval(r Record) bool {
	v := r.Number(c.field)
	switch c.op {
	case "==":
		return v == c.val
	case "!=":
		return v != c.val
	case "<":
		return v < c.val
	case "<=":
		return v <= c.val
	case ">":
		return v > c.val
	default: // >=
		return v >= c.val
	}
}

// Template is a parsed output template: text with {operand} placeholders,
// {{ and }} for braces.
type Template struct {
	parts []templatePart
	full  bool
}

type templatePart struct {
	lit string
	o   *operand
}

// ParseTemplate parses an output template over fields.
func ParseTemplate(src string, fields map[string]Field) (*Template, error) {
	if len(src) > MaxLength {
		return nil, fmt.Errorf("%w: the template is %d bytes long; at most %d", ErrSyntax, len(src), MaxLength)
	}
	t := &Template{}
	var lit strings.Builder
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '{' && i+1 < len(src) && src[i+1] == '{', c == '}' && i+1 < len(src) && src[i+1] == '}':
			lit.WriteByte(c)
			i++
		case c == '}':
			return nil, fmt.Errorf("%w: template at %d: a } with no { before it (write }} for a brace)", ErrSyntax, i+1)
		case c == '{':
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%w: template at %d: a { with no } after it (write {{ for a brace)", ErrSyntax, i+1)
			}
			name := strings.TrimSpace(src[i+1 : i+end])
			o, full, err := resolve(name, fields)
			if err != nil {
				return nil, fmt.Errorf("%w: template at %d: %v", ErrSyntax, i+2, err)
			}
			t.full = t.full || full
			if lit.Len() > 0 {
				t.parts = append(t.parts, templatePart{lit: lit.String()})
				lit.Reset()
			}
			t.parts = append(t.parts, templatePart{o: &o})
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 {
		t.parts = append(t.parts, templatePart{lit: lit.String()})
	}
	return t, nil
}

// Full reports whether t shows what only full records carry.
func (t *Template) Full() bool { return t.full }

// Render is r as t formats it: a text as it is ("-" when empty), a number
// in full, a duration in milliseconds.
func (t *Template) Render(r Record) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.o == nil {
			b.WriteString(p.lit)
			continue
		}
		switch p.o.kind {
		case Text:
			v := p.o.text(r)
			if v == "" {
				v = "-"
			}
			b.WriteString(v)
		default:
			b.WriteString(strconv.FormatFloat(r.Number(p.o.field), 'f', -1, 64))
		}
	}
	return b.String()
}

// resolve finds operand name in fields; full says only full records
// carry it.
func resolve(name string, fields map[string]Field) (operand, bool, error) {
	for _, side := range []string{"req.", "resp."} {
		if h, ok := strings.CutPrefix(name, side); ok {
			if !headerName(h) {
				return operand{}, false, fmt.Errorf("%q is no header field name (%sName, such as %sUser-Agent)", h, side, side)
			}
			return operand{field: h, kind: Text, header: true, response: side == "resp."}, true, nil
		}
	}
	f, ok := fields[strings.ToLower(name)]
	if !ok {
		return operand{}, false, fmt.Errorf("unknown field %q: want one of %s, or req.HEADER or resp.HEADER", name, fieldNames(fields))
	}
	return operand{field: strings.ToLower(name), kind: f.Kind}, f.Full, nil
}

func fieldNames(fields map[string]Field) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func headerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// parseDuration reads a duration value: Go's syntax, a unit required.
func parseDuration(s string) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	return d, err == nil && d >= 0
}
