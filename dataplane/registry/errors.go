package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error codes of the OCI distribution spec's error bodies.
const (
	CodeBlobUnknown     = "BLOB_UNKNOWN"
	CodeDigestInvalid   = "DIGEST_INVALID"
	CodeManifestInvalid = "MANIFEST_INVALID"
	CodeManifestUnknown = "MANIFEST_UNKNOWN"
	CodeNameInvalid     = "NAME_INVALID"
	CodeNameUnknown     = "NAME_UNKNOWN"
	CodeSizeInvalid     = "SIZE_INVALID"
	CodeUnauthorized    = "UNAUTHORIZED"
	CodeDenied          = "DENIED"
	CodeUnsupported     = "UNSUPPORTED"
	CodeTooManyRequests = "TOOMANYREQUESTS"
	// CodeUpstream is the mirror's own: the upstream or its token realm
	// failed (a 502 or 504).
	CodeUpstream = "UPSTREAM_FAILED"
)

// The package's errors; each reaches a client as an *Error's status and
// OCI body.
var (
	// ErrDigest: a body's digest is not the one its URL names.
	ErrDigest = errors.New("registry: body does not match its digest")
	// ErrTooLarge: a manifest over MaxManifestBytes.
	ErrTooLarge = errors.New("registry: manifest over the size bound")
	// ErrChallenge: a WWW-Authenticate the node cannot answer.
	ErrChallenge = errors.New("registry: malformed or unsupported WWW-Authenticate challenge")
	// ErrToken: the token realm failed or answered no token.
	ErrToken = errors.New("registry: no token from the realm")
	// ErrRedirects: a redirect loop, or more redirects than followed.
	ErrRedirects = errors.New("registry: too many redirects")
	// ErrCredentials: the credentials file cannot be read.
	ErrCredentials = errors.New("registry: credentials file unusable")
)

// Error is a refusal or failure as a client is answered: an HTTP status
// and an OCI error code and message.
type Error struct {
	Status  int
	Code    string
	Message string
	// Err, when set, is the cause, for errors.Is.
	Err error
}

func (e *Error) Error() string { return e.Message }

func (e *Error) Unwrap() error { return e.Err }

func errf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// upstreamError is a failure of the upstream (or its realm) caused by err.
func upstreamError(err error, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadGateway, Code: CodeUpstream, Message: fmt.Sprintf(format, args...) + ": " + err.Error(), Err: err}
}

// WriteError answers w with err's OCI error body: err's own status and
// code when it is an *Error, else status and an UPSTREAM_FAILED code with
// msg.
func WriteError(w http.ResponseWriter, err error, status int, msg string) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: status, Code: CodeUpstream, Message: msg}
		if err != nil {
			e.Message = msg + ": " + err.Error()
		}
	}
	body, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": e.Code, "message": "shardcache: " + e.Message}}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Docker-Distribution-Api-Version", "registry/2.0")
	h.Del("Content-Length")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	w.Write(append(body, '\n'))
}

// WriteBase answers GET /v2/ for the mirror: the API is there, and no
// client credentials are asked for (the node holds the upstreams').
func WriteBase(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Docker-Distribution-Api-Version", "registry/2.0")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("{}\n"))
}
