// Package opsclient calls a node's ops listener: a request with the token
// the listener asks for, and POST /warm, whose answer is a stream of
// progress lines. The admin SDK (a node's views: /stats, /inspect, /log,
// /members) and the control plane (AdminService.Warm, which has a node do
// the warm) share it, so that both read a node's answers, and its
// refusals, alike.
package opsclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/redact"
)

// What went wrong with a request to an ops listener; an *Error matches
// one of them with errors.Is.
var (
	// ErrNoOpsURL: the node did not say where its ops listener is.
	ErrNoOpsURL = errors.New("shardcache: the node advertises no ops URL")
	// ErrUnreachable: the ops listener did not answer (no connection, or
	// no answer's header in time).
	ErrUnreachable = errors.New("opsclient: the ops listener cannot be reached")
	// ErrRefused: the ops listener refused the token (401, 403).
	ErrRefused = errors.New("opsclient: the node refused the token")
	// ErrInvalid: the node refused the request (400), saying why.
	ErrInvalid = errors.New("opsclient: the node refused the request")
	// ErrFailed: the node answered another error status, or ended a warm
	// with an error of its own.
	ErrFailed = errors.New("opsclient: the node failed the request")
	// ErrBroken: the answer broke off, or is not what a node sends (a line
	// that is no WarmProgress, over the bounds, no summary at its end).
	ErrBroken = errors.New("opsclient: the node's answer broke off")
)

// Error is a failed request to one node's ops listener. Its message names
// the node; it matches its Kind, and the error under it, with errors.Is.
type Error struct {
	Node string // the member id
	Kind error  // one of the package's sentinels
	Msg  string
	Err  error // what the HTTP client or the reader said; may be nil
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives errors.Is and errors.As the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Bounds of what is read of an answer.
const (
	// maxWhy bounds what is read of an error status's body.
	maxWhy = 4096
	// MaxWarmLine bounds one progress line of a warm.
	MaxWarmLine = 64 << 10
	// MaxWarmSteps bounds the progress lines of one warm, its summary
	// included: a node warms at most 64 images (dataplane/warm), each
	// with its manifest, at most 256 platform manifests and 4096 blobs,
	// and ends with one summary.
	MaxWarmSteps = 64*(1+256+4096) + 1
)

// Client sends requests to nodes' ops listeners. Its zero value uses
// http.DefaultClient and sends no token.
type Client struct {
	// HTTP sends the requests; nil means http.DefaultClient. It bounds
	// the waits (connecting, the answer's header), never a warm's length.
	// Whatever its CheckRedirect, a redirect is never followed.
	HTTP *http.Client
	// Token is sent as the bearer token: the admin token, or for the
	// read-only views the ops token. Empty sends none.
	Token string
}

// Do sends method path (and body, protobuf JSON, when not nil) to m's ops
// listener and returns its 200 answer, body unread. Any other outcome is
// an *Error: ErrNoOpsURL, ErrUnreachable, ErrRefused (401, 403), ErrInvalid
// (400) or ErrFailed, with the node's reason.
func (c Client) Do(ctx context.Context, m *pb.Member, method, path string, body []byte) (*http.Response, error) {
	// The id, the URL and the node's reasons are the member's own words,
	// shown to an operator: their controls are escaped.
	node := m.GetId()
	id := redact.Printable(node)
	base := strings.TrimSuffix(m.GetOpsUrl(), "/")
	if base == "" {
		return nil, &Error{Node: node, Kind: ErrNoOpsURL, Msg: fmt.Sprintf("%s: %v", id, ErrNoOpsURL)}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, &Error{Node: node, Kind: ErrNoOpsURL, Msg: fmt.Sprintf("%s: ops URL %q: %v", id, base, err), Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	// The listener is the one the member advertises: a redirect is not
	// followed, so that the grant (Go's client keeps Authorization for
	// the same host's other ports) and the request go to no other
	// listener, whose answer would pass for this node's. A redirect is
	// an answer the node failed with.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &Error{Node: node, Kind: ErrUnreachable, Msg: fmt.Sprintf("%s unreachable at %s: %s", id, redact.Printable(base), redact.Printable(err.Error())), Err: err}
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxWhy))
	why := redact.Printable(strings.TrimSpace(string(b)))
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, &Error{Node: node, Kind: ErrRefused, Msg: fmt.Sprintf("%s refused %s: %s", id, path, why)}
	case http.StatusBadRequest:
		return nil, &Error{Node: node, Kind: ErrInvalid, Msg: fmt.Sprintf("%s %s: %s", id, path, why)}
	}
	return nil, &Error{Node: node, Kind: ErrFailed, Msg: fmt.Sprintf("%s %s: %d %s", id, path, resp.StatusCode, why)}
}

// Warm has node m preheat req's images (POST /warm): step gets each
// progress line as the node sends it, in order, and Warm returns the
// summary that ends the answer. An error of step stops the warm and is
// returned as it is; every other failure is an *Error (as Do's, or
// ErrFailed for an error the node ended the warm with, ErrBroken for an
// answer that broke off or broke the bounds).
func (c Client) Warm(ctx context.Context, m *pb.Member, req *pb.WarmRequest, step func(*pb.WarmProgress) error) (*pb.WarmSummary, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, m, http.MethodPost, "/warm", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	node := m.GetId()
	id := redact.Printable(node)
	broken := func(msg string, err error) error {
		return &Error{Node: node, Kind: ErrBroken, Msg: id + " /warm: " + msg, Err: err}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4096), MaxWarmLine)
	for n := 1; sc.Scan(); n++ {
		if n > MaxWarmSteps {
			return nil, broken(fmt.Sprintf("more than %d progress lines, the most a warm sends", MaxWarmSteps), nil)
		}
		p := &pb.WarmProgress{}
		if err := protojson.Unmarshal(sc.Bytes(), p); err != nil {
			return nil, broken(fmt.Sprintf("progress line %d is not a WarmProgress: %v", n, err), err)
		}
		if p.GetSummary() != nil {
			return p.GetSummary(), nil
		}
		if p.GetKind() == "" && p.GetError() != "" {
			return nil, &Error{Node: node, Kind: ErrFailed, Msg: fmt.Sprintf("%s /warm: %s", id, redact.Printable(p.GetError()))}
		}
		if err := step(p); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, broken(fmt.Sprintf("the answer broke off before its summary: %v", err), err)
	}
	return nil, broken("the answer ended without its summary", nil)
}
