package h1

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// A request head is parsed strictly (RFC 9112): whatever a lenient parser
// in front of the node could read another way is refused, never guessed
// at. Every line ends in CRLF (a bare LF is refused); a field line starts
// with a name of token characters followed at once by a colon (no space,
// no folded continuation line); a value holds no control character but
// HTAB. A request names at most one Content-Length value, and, with
// Transfer-Encoding, only chunked; HTTP/1.1 requests have exactly one
// Host.

// errStatus is a request refused before it reached the handler: the
// status it is answered with and a message that names the problem.
type errStatus struct {
	status int
	msg    string
}

func (e *errStatus) Error() string { return e.msg }

func bad(msg string) *errStatus { return &errStatus{http.StatusBadRequest, msg} }

// head is a parsed request head. Its strings share one allocation: the
// head's bytes, copied once.
type head struct {
	method, target, proto string
	url                   *url.URL
	major, minor          int
	host                  string
	header                http.Header
	contentLength         int64 // -1: none
	chunked               bool
	close                 bool // the connection closes after this request
	keepAlive             bool // HTTP/1.0 asked to keep the connection
	expectContinue        bool
	answer                *answer // the handler's writer, in block
}

// block is what one request allocates besides its header map and the
// head's text: the URL, the handler's writer and up to inlineValues field
// values, in one piece.
type block struct {
	url    url.URL
	answer answer
	vals   [inlineValues]string
}

// inlineValues is how many field values share the request's allocation;
// more take one more.
const inlineValues = 16

// tokenChars are the bytes a method or field name may hold (RFC 9110
// 5.6.2).
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// parseHead parses b, a request head ending in its empty line, CRLF
// terminated. The strings of the result point into one copy of b.
func parseHead(b []byte, blk *block) (*head, *errStatus) {
	// Canonicalise field names in place first, so that the one copy holds
	// them as the header map keys them.
	nfields := 0
	lineStart := 0
	first := true
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i == 0 || b[i-1] != '\r' {
			return nil, bad("a line of the request ends in a bare LF, not CRLF")
		}
		line := b[lineStart : i-1]
		lineStart = i + 1
		if first {
			first = false
			continue
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, bad("a header field is folded over lines (obs-fold)")
		}
		colon := -1
		for j, c := range line {
			if c == ':' {
				colon = j
				break
			}
			if !tokenChars[c] {
				if c == ' ' || c == '\t' {
					return nil, bad("a header field name is followed by whitespace before its colon")
				}
				return nil, bad("a header field name holds a character a name may not: " + strconv.QuoteToASCII(string(line[:min(len(line), 64)])))
			}
		}
		if colon <= 0 {
			return nil, bad("a header line has no field name and colon: " + strconv.QuoteToASCII(string(line[:min(len(line), 64)])))
		}
		for _, c := range line[colon+1:] {
			if c < ' ' && c != '\t' || c == 0x7f {
				return nil, bad("the value of header field " + string(line[:colon]) + " holds a control character")
			}
		}
		canonicalise(line[:colon])
		nfields++
	}
	s := string(b) // the one copy
	h := &head{contentLength: -1}
	eol := strings.Index(s, "\r\n")
	if err := h.requestLine(s[:eol]); err != nil {
		return nil, err
	}
	h.header = make(http.Header, nfields)
	vals := blk.vals[:0:0]
	if nfields <= inlineValues {
		vals = blk.vals[:0:nfields]
	}
	hosts := 0
	for rest := s[eol+2:]; ; {
		eol := strings.Index(rest, "\r\n")
		line := rest[:eol]
		rest = rest[eol+2:]
		if line == "" {
			break
		}
		colon := strings.IndexByte(line, ':')
		name, value := line[:colon], strings.Trim(line[colon+1:], " \t")
		if err := h.field(name, value, &hosts); err != nil {
			return nil, err
		}
		switch name {
		case "Host", "Transfer-Encoding":
			continue // in the request's Host and TransferEncoding, not its header (as net/http has them)
		case "Content-Length":
			if _, ok := h.header[name]; ok {
				continue // the same value again (field refused two)
			}
		}
		if vv, ok := h.header[name]; ok {
			h.header[name] = append(vv, value)
			continue
		}
		if len(vals) < cap(vals) {
			vals = append(vals, value)
			h.header[name] = vals[len(vals)-1 : len(vals) : len(vals)]
		} else {
			h.header[name] = []string{value}
		}
	}
	return h, h.check(hosts)
}

// requestLine parses "method SP target SP version".
func (h *head) requestLine(line string) *errStatus {
	sp1 := strings.IndexByte(line, ' ')
	sp2 := strings.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 == sp1 {
		return bad("the request line is not method, target and version: " + strconv.QuoteToASCII(line[:min(len(line), 64)]))
	}
	h.method, h.target, h.proto = line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	for i := 0; i < len(h.method); i++ {
		if !tokenChars[h.method[i]] {
			return bad("the method holds a character a method may not")
		}
	}
	if h.target == "" {
		return bad("the request target is empty")
	}
	for i := 0; i < len(h.target); i++ {
		if c := h.target[i]; c <= ' ' || c == 0x7f {
			return bad("the request target holds a space or a control character")
		}
	}
	switch h.proto {
	case "HTTP/1.1":
		h.major, h.minor = 1, 1
	case "HTTP/1.0":
		h.major, h.minor = 1, 0
	default:
		if len(h.proto) == 8 && strings.HasPrefix(h.proto, "HTTP/") && h.proto[6] == '.' &&
			h.proto[5] >= '2' && h.proto[5] <= '9' && h.proto[7] >= '0' && h.proto[7] <= '9' {
			return &errStatus{http.StatusHTTPVersionNotSupported, "this listener speaks HTTP/1.1 and HTTP/1.0, not " + h.proto}
		}
		return bad("the request line's version is not HTTP/1.1 or HTTP/1.0: " + strconv.QuoteToASCII(h.proto[:min(len(h.proto), 16)]))
	}
	return nil
}

// field reads what the server itself acts on of one field.
func (h *head) field(name, value string, hosts *int) *errStatus {
	switch name {
	case "Host":
		*hosts++
		h.host = value
	case "Content-Length":
		// Lines of the same value are one value; two values are two
		// framings. A list in one line is refused, as net/http does.
		n, err := strconv.ParseUint(value, 10, 63)
		if err != nil || value == "" || value[0] == '+' {
			return bad("Content-Length " + strconv.QuoteToASCII(value[:min(len(value), 32)]) + " is not one length")
		}
		if h.contentLength >= 0 && int64(n) != h.contentLength {
			return bad("the request gives two Content-Length values")
		}
		h.contentLength = int64(n)
	case "Transfer-Encoding":
		if h.minor == 0 {
			// RFC 9112 6.1: faulty framing in HTTP/1.0. Refused, so that
			// what it sent as a body is never read as a request.
			return bad("an HTTP/1.0 request names Transfer-Encoding, which HTTP/1.0 does not have")
		}
		if h.chunked || !strings.EqualFold(value, "chunked") {
			return &errStatus{http.StatusNotImplemented, "the request's Transfer-Encoding is not chunked alone: " + strconv.QuoteToASCII(value[:min(len(value), 32)])}
		}
		h.chunked = true
	case "Connection":
		for opt := range strings.SplitSeq(value, ",") {
			opt = strings.Trim(opt, " \t")
			if strings.EqualFold(opt, "close") {
				h.close = true
			} else if strings.EqualFold(opt, "keep-alive") {
				h.keepAlive = true
			}
		}
	case "Expect":
		if strings.EqualFold(value, "100-continue") {
			h.expectContinue = true
		} else if h.minor == 1 {
			return &errStatus{http.StatusExpectationFailed, "the request expects " + strconv.QuoteToASCII(value[:min(len(value), 32)]) + ", which this server does not meet"}
		}
	}
	return nil
}

// check applies the rules that take the whole head.
func (h *head) check(hosts int) *errStatus {
	if h.minor == 1 && hosts != 1 {
		if hosts == 0 {
			return bad("an HTTP/1.1 request has no Host")
		}
		return bad("the request has more than one Host")
	}
	if hosts > 1 {
		return bad("the request has more than one Host")
	}
	for i := 0; i < len(h.host); i++ {
		if c := h.host[i]; c <= ' ' || c == 0x7f || c == '/' || c == '@' || c == '?' || c == '#' || c == '\\' {
			return bad("the Host " + strconv.QuoteToASCII(h.host[:min(len(h.host), 64)]) + " is not a host")
		}
	}
	if h.chunked {
		// RFC 9112 6.3: Transfer-Encoding overrides Content-Length. The
		// request is read by its chunks, and the connection closes after
		// the answer (conn.go), so what a Content-Length reader in front
		// took for its end is never taken for the next request.
		h.contentLength = -1
		h.header.Del("Content-Length")
		h.close = true
	}
	if h.minor == 0 && !h.keepAlive {
		h.close = true
	}
	if h.minor == 0 {
		h.expectContinue = false
	}
	return nil
}

// parseTarget makes the request's URL from its target: origin-form,
// absolute-form, authority-form (CONNECT) or asterisk-form.
func parseTarget(method, target string, u *url.URL) *errStatus {
	switch {
	case method == http.MethodConnect && !strings.HasPrefix(target, "/"):
		// authority-form, read as net/http reads it
		p, err := url.ParseRequestURI("http://" + target)
		if err != nil || p.Path != "" || p.RawQuery != "" || p.User != nil {
			return bad("the CONNECT target is not an authority: " + strconv.QuoteToASCII(target[:min(len(target), 64)]))
		}
		p.Scheme = ""
		*u = *p
		return nil
	case target[0] == '/' && strings.IndexAny(target, "%#") < 0:
		// The common case, without url's parser: what it would make of
		// a path with nothing escaped.
		path, query, hasQuery := strings.Cut(target, "?")
		*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
		return nil
	}
	p, err := url.ParseRequestURI(target)
	if err != nil {
		return bad("the request target is not a URI: " + strconv.QuoteToASCII(target[:min(len(target), 64)]))
	}
	*u = *p
	return nil
}

// canonicalise makes a field name canonical in place (textproto's form:
// the first letter and each after a hyphen upper case, the rest lower).
func canonicalise(name []byte) {
	upper := true
	for i, c := range name {
		switch {
		case upper && 'a' <= c && c <= 'z':
			name[i] = c - 'a' + 'A'
		case !upper && 'A' <= c && c <= 'Z':
			name[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
}
