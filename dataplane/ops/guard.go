package ops

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/shardcache/shardcache/sdk/opsclient"
)

// What an ops endpoint needs of its caller: the admin token, or for what
// only reads the node's figures and logs the read-only ops token too.
const (
	adminOnly = false
	readOnly  = true
)

// opsGuard lets h serve only a caller that sends the admin token (or, for
// a read-only endpoint, the ops token): what takes the node out of the
// ring or reads its insides is not for anyone who can reach the ops port.
// A loopback caller is no exception (a sidecar proxy connects from
// loopback), unless the node was told to trust loopback
// (Config.TrustLoopback). The probes' and the scraper's /healthz, /readyz and
// /metrics stay open.
func (l *listener) guard(reads bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if l.cfg.TrustLoopback {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			if a, err := netip.ParseAddr(host); err == nil && a.Unmap().IsLoopback() {
				h(w, r)
				return
			}
		}
		token, sent := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		matches := func(want string) bool {
			return want != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
		}
		switch {
		case sent && (matches(l.cfg.AdminToken) || reads && matches(l.cfg.OpsToken)):
			h(w, r)
			return
		case sent && reads && opsclient.IsReadGrant(token):
			// What the admin SDK sends in place of its token: a grant for
			// this node alone, signed with the admin or the ops token.
			now := time.Now()
			err := opsclient.CheckReadGrant(l.cfg.AdminToken, l.cfg.ID, token, now)
			if err != nil && l.cfg.OpsToken != "" {
				err = opsclient.CheckReadGrant(l.cfg.OpsToken, l.cfg.ID, token, now)
			}
			if err != nil {
				l.refuse(w, r, "bad_grant", err.Error(), err.Error())
				return
			}
			h(w, r)
			return
		case sent:
			l.refuse(w, r, "bad_token", "wrong token", "the token does not match")
		default:
			want := "the admin token"
			if reads {
				want = "the admin or the ops token"
			}
			l.refuse(w, r, "no_token", "no token", r.URL.Path+" needs Authorization: Bearer <"+want+">")
		}
	}
}

// refuse answers 401 for a caller without the right credential, counted
// by reason and logged with why.
func (l *listener) refuse(w http.ResponseWriter, r *http.Request, reason, why, msg string) {
	l.cfg.Metrics.OpsRefused.WithLabelValues(reason).Inc()
	l.cfg.Logger.Warn("refused an ops request: "+why, "path", r.URL.Path, "remote", r.RemoteAddr)
	w.Header().Set("WWW-Authenticate", `Bearer realm="shardcache ops"`)
	http.Error(w, "ops listener: "+msg, http.StatusUnauthorized)
}

// guardWarm is guard's admin check for POST /warm, which also takes a warm
// grant for this node (opsclient.WarmGrant, signed with the admin token):
// what the control plane sends in place of the admin token.
func (l *listener) guardWarm(h http.HandlerFunc) http.HandlerFunc {
	admin := l.guard(adminOnly, h)
	return func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !opsclient.IsWarmGrant(token) {
			admin(w, r)
			return
		}
		if err := opsclient.CheckWarmGrant(l.cfg.AdminToken, l.cfg.ID, token, time.Now()); err != nil {
			l.refuse(w, r, "bad_grant", err.Error(), err.Error())
			return
		}
		h(w, r)
	}
}
