package opsclient

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A grant is what is sent to a node's ops listener in place of a token:
// the right to one kind of request on that one node, until a moment a few
// minutes off, signed with the token it stands for (HMAC-SHA256). A
// member advertises its own ops URL, and whoever holds only the join token
// can register one; what such a listener receives is a grant for itself
// that expires, never the token.
//
// A warm grant (the control plane's, for POST /warm) is signed with the
// admin token; a read grant (the admin SDK's, for a node's views: /stats,
// /inspect, /log, /members) with the admin or the ops token. Their form:
// "<kind>-grant.v1.<node id>.<unix seconds>.<hex signature>", the kind
// signed with the rest, so one kind never passes for the other.

// MaxGrantLife bounds how far ahead of now a grant may expire: a later one
// is refused, so that a grant is short-lived whatever its maker.
const MaxGrantLife = 10 * time.Minute

// ErrGrant wraps the refusals of a grant.
var ErrGrant = errors.New("opsclient: not a valid grant")

// The kinds of grant.
const (
	warmKind = "warm"
	readKind = "read"
)

// WarmGrant is a warm grant, signed with adminToken, for node to warm
// until expires.
func WarmGrant(adminToken, node string, expires time.Time) string {
	return makeGrant(warmKind, adminToken, node, expires)
}

// ReadGrant is a read grant, signed with token (the admin or the ops
// token), for node's views until expires.
func ReadGrant(token, node string, expires time.Time) string {
	return makeGrant(readKind, token, node, expires)
}

// IsWarmGrant reports whether token has a warm grant's form (and is to
// be checked with CheckWarmGrant rather than compared with a token).
func IsWarmGrant(token string) bool { return strings.HasPrefix(token, grantPrefix(warmKind)) }

// IsReadGrant reports whether token has a read grant's form.
func IsReadGrant(token string) bool { return strings.HasPrefix(token, grantPrefix(readKind)) }

// CheckWarmGrant checks that grant is a warm grant adminToken signed for
// node, and that at now it has not expired and expires within
// MaxGrantLife.
func CheckWarmGrant(adminToken, node, grant string, now time.Time) error {
	return checkGrant(warmKind, adminToken, node, grant, now)
}

// CheckReadGrant is CheckWarmGrant for a read grant signed with token.
func CheckReadGrant(token, node, grant string, now time.Time) error {
	return checkGrant(readKind, token, node, grant, now)
}

func grantPrefix(kind string) string { return kind + "-grant.v1." }

func makeGrant(kind, token, node string, expires time.Time) string {
	at := strconv.FormatInt(expires.Unix(), 10)
	return grantPrefix(kind) + node + "." + at + "." + grantSignature(kind, token, node, at)
}

func checkGrant(kind, token, node, grant string, now time.Time) error {
	rest, ok := strings.CutPrefix(grant, grantPrefix(kind))
	if !ok || token == "" {
		return fmt.Errorf("%w: not one", ErrGrant)
	}
	// A node id may hold dots; the expiry and the signature do not.
	rest, sig, ok1 := cutLast(rest)
	id, at, ok2 := cutLast(rest)
	if !ok1 || !ok2 {
		return fmt.Errorf("%w: malformed", ErrGrant)
	}
	if !hmac.Equal([]byte(sig), []byte(grantSignature(kind, token, id, at))) {
		return fmt.Errorf("%w: the signature does not match", ErrGrant)
	}
	if id != node {
		return fmt.Errorf("%w: it is for node %q, not %q", ErrGrant, id, node)
	}
	sec, err := strconv.ParseInt(at, 10, 64)
	switch expires := time.Unix(sec, 0); {
	case err != nil:
		return fmt.Errorf("%w: malformed expiry", ErrGrant)
	case !now.Before(expires):
		return fmt.Errorf("%w: it expired at %s", ErrGrant, expires.UTC().Format(time.RFC3339))
	case expires.Sub(now) > MaxGrantLife:
		return fmt.Errorf("%w: it expires more than %s ahead", ErrGrant, MaxGrantLife)
	}
	return nil
}

func grantSignature(kind, token, node, at string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("shardcache " + kind + " grant v1\n" + node + "\n" + at))
	return hex.EncodeToString(mac.Sum(nil))
}

// cutLast cuts s around its last dot.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}
