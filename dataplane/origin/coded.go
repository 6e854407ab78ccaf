package origin

import (
	"bufio"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/rawio"
)

// net/http's client takes a response's Transfer-Encoding only as one
// "chunked" field (it refuses a list, however valid, to keep request
// smuggling out), so an origin answering "gzip, chunked", or chunked over
// two field lines, or gzip delimited by the connection's close (RFC 9112
// 6.1, 6.3), would be answered 502. Such a response is fetched again on a
// connection of its own and read here: the transfer codings are decoded in
// the order the origin applied them, and what the caller gets is the
// response's content with no Transfer-Encoding, its length unknown, to be
// stored and sent with a framing of the node's own.

// unsupportedTE reports whether err is net/http's refusal of a response's
// Transfer-Encoding.
func unsupportedTE(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "unsupported transfer encoding") || strings.Contains(s, "too many transfer encodings")
}

// codingError is an origin answer whose transfer codings the node cannot
// parse or decode: its message is err's, and errors.Is(e,
// httpcache.ErrTransferCoding) holds, so that Proxy-Status names it.
type codingError struct{ err error }

func (e codingError) Error() string      { return e.err.Error() }
func (e codingError) Unwrap() error      { return e.err }
func (codingError) Is(target error) bool { return target == httpcache.ErrTransferCoding }

// maxCodedHead bounds the response head read here, as the transport's
// MaxResponseHeaderBytes does.
const maxCodedHead = 64 << 10

// fetchCoded sends req (which has no body) on a new connection, closed
// after the answer, and reads the response with its transfer codings
// decoded.
func (c *Client) fetchCoded(req *http.Request) (*http.Response, error) {
	host := req.URL.Host
	if req.URL.Port() == "" {
		port := "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(req.URL.Hostname(), port)
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(req.Context(), "tcp", host)
	if err != nil {
		return nil, err
	}
	conn = rawio.Wrap(conn)
	if req.URL.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: req.URL.Hostname(), NextProtos: []string{"http/1.1"}})
		if err := tc.HandshakeContext(req.Context()); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	// The request's context ends the connection, as the transport's would.
	stop := context.AfterFunc(req.Context(), func() { conn.Close() })
	resp, err := c.readCoded(conn, req)
	if err != nil {
		stop()
		conn.Close()
		return nil, err
	}
	resp.Body = &codedBody{Reader: resp.Body, close: func() error { stop(); return conn.Close() }}
	return resp, nil
}

// readCoded writes req on conn and reads its answer (1xx interim answers
// skipped), decoding the body's transfer codings.
func (c *Client) readCoded(conn net.Conn, req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.Header.Set("Connection", "close")
	if c.cfg.HeaderTimeout > 0 {
		conn.SetDeadline(time.Now().Add(c.cfg.HeaderTimeout))
	}
	if err := out.Write(conn); err != nil {
		return nil, err
	}
	head := &io.LimitedReader{R: conn, N: maxCodedHead}
	br := bufio.NewReader(head)
	tp := textproto.NewReader(br)
	var resp *http.Response
	for resp == nil || resp.StatusCode < 200 {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, fmt.Errorf("origin response: %w", err)
		}
		proto, status, ok := strings.Cut(line, " ")
		code, _, _ := strings.Cut(status, " ")
		n, err := strconv.Atoi(code)
		if !ok || err != nil || len(code) != 3 || !strings.HasPrefix(proto, "HTTP/1.") {
			return nil, fmt.Errorf("origin response: malformed status line %q", line)
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return nil, fmt.Errorf("origin response header: %w", err)
		}
		resp = &http.Response{Status: status, StatusCode: n, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header(h), Request: req, ContentLength: -1}
	}
	conn.SetDeadline(time.Time{})
	// The head is read; the body may be as long as it is.
	head.N = 1 << 62
	codings, err := transferCodings(resp.Header.Values("Transfer-Encoding"))
	if err != nil {
		return nil, codingError{err}
	}
	resp.Header.Del("Transfer-Encoding")
	resp.Header.Del("Content-Length") // a Transfer-Encoding overrides it (RFC 9112 6.3)
	var body io.Reader = br
	if len(codings) > 0 && codings[len(codings)-1] == "chunked" {
		body = httputil.NewChunkedReader(br)
		codings = codings[:len(codings)-1]
	} // else the body ends when the origin closes the connection
	for i := len(codings) - 1; i >= 0; i-- {
		switch codings[i] {
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(body)
			if err != nil {
				return nil, codingError{fmt.Errorf("origin response: gzip transfer coding: %w", err)}
			}
			body = zr
		case "deflate":
			zr, err := zlib.NewReader(body)
			if err != nil {
				return nil, codingError{fmt.Errorf("origin response: deflate transfer coding: %w", err)}
			}
			body = zr
		case "identity":
		default:
			return nil, codingError{fmt.Errorf("origin response: transfer coding %q, which shardcache cannot decode", codings[i])}
		}
	}
	resp.Body = io.NopCloser(body)
	return resp, nil
}

// transferCodings parses the Transfer-Encoding field lines into the list of
// codings, lower case, in the order applied. chunked may only be last
// (RFC 9112 6.1); a coding must be a token, with parameters allowed.
func transferCodings(lines []string) ([]string, error) {
	var out []string
	for _, line := range lines {
		for c := range strings.SplitSeq(line, ",") {
			c = strings.TrimSpace(c)
			if c == "" {
				continue
			}
			name, _, _ := strings.Cut(c, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" || strings.ContainsFunc(name, func(r rune) bool { return !isTokenChar(r) }) {
				return nil, fmt.Errorf("origin response: malformed Transfer-Encoding %q", line)
			}
			out = append(out, name)
		}
	}
	for i, c := range out {
		if c == "chunked" && i != len(out)-1 {
			return nil, errors.New("origin response: Transfer-Encoding applies chunked before another coding")
		}
	}
	return out, nil
}

// isTokenChar reports whether r may appear in an HTTP token (RFC 9110 5.6.2).
func isTokenChar(r rune) bool {
	return r < 0x7f && r > 0x20 && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
}

// codedBody is a decoded body whose Close closes its connection.
type codedBody struct {
	io.Reader
	close func() error
}

func (b *codedBody) Close() error { return b.close() }
