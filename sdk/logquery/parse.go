package logquery

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

type tokKind int

const (
	tokEnd tokKind = iota
	tokWord
	tokString
	tokOp
	tokOpen
	tokClose
)

type token struct {
	kind tokKind
	text string // a string's value, unquoted
	pos  int    // 1-based byte offset in the source
}

func (t token) describe() string {
	switch t.kind {
	case tokEnd:
		return "end of the filter"
	case tokString:
		return strconv.Quote(t.text)
	}
	return `"` + t.text + `"`
}

// wordChar is a byte of a bare word: a field, a header operand, a number,
// a duration, or a value such as relayed or 127.0.0.1.
func wordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.-:/+*", c) >= 0
}

func lex(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')':
			k := tokOpen
			if c == ')' {
				k = tokClose
			}
			toks = append(toks, token{kind: k, text: string(c), pos: i + 1})
			i++
		case c == '"' || c == '\'':
			s, n, err := quoted(src[i:])
			if err != nil {
				return nil, fmt.Errorf("%w: at %d: %v", ErrSyntax, i+1, err)
			}
			toks = append(toks, token{kind: tokString, text: s, pos: i + 1})
			i += n
		case strings.IndexByte("=!<>~", c) >= 0:
			op := string(c)
			if i+1 < len(src) && (src[i+1] == '=' && c != '~' || c == '!' && src[i+1] == '~') {
				op = src[i : i+2]
			}
			switch op {
			case "=":
				return nil, fmt.Errorf("%w: at %d: \"=\" is no operator: compare with ==", ErrSyntax, i+1)
			case "!":
				return nil, fmt.Errorf("%w: at %d: \"!\" is no operator: write not, !=, or !~", ErrSyntax, i+1)
			}
			toks = append(toks, token{kind: tokOp, text: op, pos: i + 1})
			i += len(op)
		case wordChar(c):
			j := i
			for j < len(src) && wordChar(src[j]) {
				j++
			}
			toks = append(toks, token{kind: tokWord, text: src[i:j], pos: i + 1})
			i = j
		default:
			return nil, fmt.Errorf("%w: at %d: unexpected %q", ErrSyntax, i+1, string(c))
		}
	}
	return append(toks, token{kind: tokEnd, pos: len(src) + 1}), nil
}

// quoted reads the string at the start of s: "..." with Go's escapes, or
// '...' as it is. It returns the value and the bytes it took.
func quoted(s string) (string, int, error) {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q == '"':
			i++
		case s[i] == q:
			if q == '\'' {
				return s[1:i], i + 1, nil
			}
			v, err := strconv.Unquote(s[:i+1])
			if err != nil {
				return "", 0, fmt.Errorf("the string %s has an invalid escape", s[:i+1])
			}
			return v, i + 1, nil
		}
	}
	return "", 0, fmt.Errorf("a string that does not end (no closing %c)", q)
}

type parser struct {
	toks   []token
	i      int
	fields map[string]Field
	src    string
	n      int // comparisons so far
	full   bool
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEnd {
		p.i++
	}
	return t
}

func (p *parser) errAt(t token, format string, args ...any) error {
	return fmt.Errorf("%w: at %d: %s", ErrSyntax, t.pos, fmt.Sprintf(format, args...))
}

func keyword(t token, kw string) bool { return t.kind == tokWord && strings.EqualFold(t.text, kw) }

func (p *parser) or(depth int) (node, error) {
	l, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for keyword(p.peek(), "or") {
		p.next()
		r, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		l = orNode{l, r}
	}
	return l, nil
}

func (p *parser) and(depth int) (node, error) {
	l, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for keyword(p.peek(), "and") {
		p.next()
		r, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		l = andNode{l, r}
	}
	return l, nil
}

func (p *parser) unary(depth int) (node, error) {
	if depth >= MaxDepth {
		return nil, p.errAt(p.peek(), "nested more than %d deep", MaxDepth)
	}
	t := p.peek()
	switch {
	case keyword(t, "not"):
		p.next()
		n, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	case t.kind == tokOpen:
		p.next()
		n, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tokClose {
			return nil, p.errAt(c, "unexpected %s: want ) to close the ( at %d", c.describe(), t.pos)
		}
		return n, nil
	}
	return p.compare()
}

func (p *parser) compare() (node, error) {
	t := p.next()
	if t.kind != tokWord || keyword(t, "and") || keyword(t, "or") {
		return nil, p.errAt(t, "unexpected %s: want a field (status, path, reason...), req.HEADER or resp.HEADER", t.describe())
	}
	if p.n++; p.n > MaxComparisons {
		return nil, p.errAt(t, "more than %d comparisons", MaxComparisons)
	}
	o, full, err := resolve(t.text, p.fields)
	if err != nil {
		return nil, p.errAt(t, "%v", err)
	}
	p.full = p.full || full
	op := p.next()
	if op.kind != tokOp {
		return nil, p.errAt(op, "unexpected %s after %s: want an operator (== != < <= > >= ~ !~)", op.describe(), t.text)
	}
	v := p.next()
	if v.kind != tokWord && v.kind != tokString {
		return nil, p.errAt(v, "unexpected %s after %s %s: want a value", v.describe(), t.text, op.text)
	}
	if o.kind == Text {
		return p.textCompare(o, t, op, v)
	}
	return p.numberCompare(o, t, op, v)
}

func (p *parser) textCompare(o operand, field, op, v token) (node, error) {
	c := textCompare{o: o, op: op.text, val: v.text}
	switch op.text {
	case "==", "!=":
	case "~", "!~":
		if len(v.text) > MaxRegexp {
			return nil, p.errAt(v, "a regular expression of %d bytes; at most %d", len(v.text), MaxRegexp)
		}
		re, err := regexp.Compile(v.text)
		if err != nil {
			return nil, p.errAt(v, "%s is not a regular expression: %v", strconv.Quote(v.text), err)
		}
		c.re = re
	default:
		return nil, p.errAt(op, "%s is text: compare it with == != ~ !~, not %s", field.text, op.text)
	}
	return c, nil
}

func (p *parser) numberCompare(o operand, field, op, v token) (node, error) {
	if op.text == "~" || op.text == "!~" {
		return nil, p.errAt(op, "%s is %s: compare it with == != < <= > >=, not %s", field.text, o.kind, op.text)
	}
	c := numberCompare{field: o.field, op: op.text}
	if o.kind == Duration {
		d, ok := parseDuration(v.text)
		if !ok {
			return nil, p.errAt(v, "%s is a duration: %s is not one; write it with a unit, such as 100ms or 1.5s", field.text, v.describe())
		}
		c.val = float64(d) / 1e6
		return c, nil
	}
	n, err := strconv.ParseFloat(v.text, 64)
	if err != nil || v.kind == tokString {
		return nil, p.errAt(v, "%s is a number: %s is not one", field.text, v.describe())
	}
	c.val = n
	return c, nil
}
