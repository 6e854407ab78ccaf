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

// A warm grant is what the control plane sends a node's POST /warm in
// place of the admin token: the right to have that one node warm, until a
// moment a few minutes off, signed with the admin token (HMAC-SHA256). A
// member advertises its own ops URL, and whoever holds only the join
// token can register one; what such a listener receives is a grant for
// itself that expires, never the admin token.
//
// Its form: "warm-grant.v1.<node id>.<unix seconds>.<hex signature>".

// MaxGrantLife bounds how far ahead of now a warm grant may expire: a
// later one is refused, so that a grant is short-lived whatever its maker.
const MaxGrantLife = 10 * time.Minute

// ErrGrant wraps the refusals of a warm grant.
var ErrGrant = errors.New("opsclient: not a valid warm grant")

const grantPrefix = "warm-grant.v1."

// WarmGrant is a grant, signed with adminToken, for node to warm until
// expires.
func WarmGrant(adminToken, node string, expires time.Time) string {
	at := strconv.FormatInt(expires.Unix(), 10)
	return grantPrefix + node + "." + at + "." + grantSignature(adminToken, node, at)
}

// IsWarmGrant reports whether token has a warm grant's form (and is to
// be checked with CheckWarmGrant rather than compared with a token).
func IsWarmGrant(token string) bool { return strings.HasPrefix(token, grantPrefix) }

// CheckWarmGrant checks that grant is one adminToken signed for node, and
// that at now it has not expired and expires within MaxGrantLife.
func CheckWarmGrant(adminToken, node, grant string, now time.Time) error {
	rest, ok := strings.CutPrefix(grant, grantPrefix)
	if !ok || adminToken == "" {
		return fmt.Errorf("%w: not one", ErrGrant)
	}
	// A node id may hold dots; the expiry and the signature do not.
	rest, sig, ok1 := cutLast(rest)
	id, at, ok2 := cutLast(rest)
	if !ok1 || !ok2 {
		return fmt.Errorf("%w: malformed", ErrGrant)
	}
	if !hmac.Equal([]byte(sig), []byte(grantSignature(adminToken, id, at))) {
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

func grantSignature(adminToken, node, at string) string {
	mac := hmac.New(sha256.New, []byte(adminToken))
	mac.Write([]byte("shardcache warm grant v1\n" + node + "\n" + at))
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
