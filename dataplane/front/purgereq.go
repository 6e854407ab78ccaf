package front

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/authlimit"
	"github.com/shardcache/shardcache/sdk/policy"
)

// purgeCallTimeout bounds a PURGE's call to the control plane: its default
// wait for the nodes' acknowledgements, and some.
const purgeCallTimeout = 15 * time.Second

// servePurge handles the PURGE method on the client listener, as the NGINX
// Ingress proposal has it, through the same control-plane path as cachectl:
//
//	PURGE /path?query          the URL, every variant and copy of it
//	PURGE /prefix*             everything under the prefix on this host
//	                           ("/*" also needs X-Purge-All: true)
//	X-Purge-Soft: true         with any of them: mark stale, not remove
//	PURGE / + Surrogate-Key or Cache-Tag header: every object with the tags
//
// It is allowed with "Authorization: Bearer <admin token>", checked by the
// control plane, or from the PurgeAllow addresses; the answer is the
// per-node summary as JSON: 200 once every node acknowledged, 202 when some
// are still pending (they apply it when they reconnect).
//
// A token is checked here first for its shape, and a client whose tokens
// the control plane refused too often is answered 429 unread: a node is
// not a free oracle for guessing the admin token.
func (f *Front) servePurge(w http.ResponseWriter, r *http.Request, client string) {
	token, hasToken := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if hasToken {
		if ok, wait := f.purgeAuth.Allow(authlimit.Key(client), time.Now()); !ok {
			f.cfg.Metrics.PurgeAuthRefused.WithLabelValues("throttled").Inc()
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			purgeError(w, http.StatusTooManyRequests, "too many PURGE requests with a wrong token from "+client)
			return
		}
		if !tokenShaped(token) {
			f.purgeAuth.Fail(authlimit.Key(client), time.Now())
			f.cfg.Metrics.PurgeAuthRefused.WithLabelValues("malformed").Inc()
			purgeError(w, http.StatusUnauthorized, "the bearer token is malformed (want 8 to 512 printable characters, no spaces)")
			return
		}
	}
	if !hasToken {
		a, err := netip.ParseAddr(client)
		if err != nil || !f.purgeAllowed(a.Unmap()) {
			purgeError(w, http.StatusForbidden, "PURGE is allowed only with Authorization: Bearer <admin token> or from the configured purge addresses")
			return
		}
		token = f.cfg.AdminToken
	}
	calls, err := f.purgeCalls(r)
	if err != nil {
		purgeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), purgeCallTimeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if hasToken && f.cfg.JoinToken != "" {
		// The client's own token: a wrong one is held against the client
		// at the control plane, never against this node, which proves it
		// relays with its join token.
		ctx = metadata.AppendToOutgoingContext(ctx, pb.PurgeForMetadata, client, pb.RelayTokenMetadata, f.cfg.JoinToken)
	}
	out := struct {
		Complete bool              `json:"complete"`
		Purges   []json.RawMessage `json:"purges"`
	}{Complete: true}
	for _, call := range calls {
		st, err := f.cfg.Purger.Purge(ctx, call)
		if hasToken && status.Code(err) == codes.Unauthenticated {
			f.purgeAuth.Fail(authlimit.Key(client), time.Now())
			f.cfg.Metrics.PurgeAuthRefused.WithLabelValues("wrong").Inc()
		}
		if err != nil {
			code, msg := purgeStatusCode(err, f.cfg.ControlPlane)
			if len(out.Purges) > 0 {
				msg = fmt.Sprintf("%s (%d of the request's %d purges were recorded before this one failed)", msg, len(out.Purges), len(calls))
			}
			purgeError(w, code, msg)
			return
		}
		raw, err := protojson.Marshal(st)
		if err != nil {
			purgeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		out.Purges = append(out.Purges, raw)
		out.Complete = out.Complete && st.GetComplete()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if out.Complete {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusAccepted)
	}
	json.NewEncoder(w).Encode(out)
}

func (f *Front) purgeAllowed(a netip.Addr) bool {
	for _, p := range f.cfg.PurgeAllow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// MaxPurgeTags bounds the tags one PURGE request may name: each is a
// purge of its own, recorded and sent to every node.
const MaxPurgeTags = 32

// purgeCalls reads what a PURGE request asks for.
func (f *Front) purgeCalls(r *http.Request) ([]PurgeCall, error) {
	id := r.Header.Get("X-Request-Id")
	soft := strings.EqualFold(r.Header.Get("X-Purge-Soft"), "true")
	var tags []string
	httpcache.EntryTags(r.Header, func(t string) bool {
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
		return len(tags) > MaxPurgeTags
	})
	if len(tags) > MaxPurgeTags {
		return nil, fmt.Errorf("PURGE names more than %d tags (Surrogate-Key, Cache-Tag); send at most %d per request", MaxPurgeTags, MaxPurgeTags)
	}
	if len(tags) > 0 {
		calls := make([]PurgeCall, 0, len(tags))
		for i, t := range tags {
			tid := id
			if id != "" && len(tags) > 1 {
				tid = fmt.Sprintf("%s:%d", id, i)
			}
			calls = append(calls, func(ctx context.Context, c pb.AdminServiceClient) (*pb.PurgeStatus, error) {
				resp, err := c.PurgeTag(ctx, &pb.PurgeTagRequest{RequestId: tid, Tag: t, Soft: soft})
				return resp.GetStatus(), err
			})
		}
		return calls, nil
	}
	// The prefix as entries record their URL (purge.EntryURL): escaped as
	// the client sent it, so PURGE /caf%C3%A9/* matches GET /caf%C3%A9/menu.
	if prefix, ok := strings.CutSuffix(r.URL.EscapedPath(), "*"); ok {
		if r.URL.RawQuery != "" {
			return nil, fmt.Errorf("PURGE %s: a prefix purge takes no query", r.URL.RequestURI())
		}
		all := strings.EqualFold(r.Header.Get("X-Purge-All"), "true")
		if prefix == "/" && !all {
			return nil, fmt.Errorf("PURGE /* purges everything on %s: send X-Purge-All: true to confirm", policy.Host(r))
		}
		req := &pb.PurgePrefixRequest{RequestId: id, Host: policy.Host(r), PathPrefix: prefix, All: all, Soft: soft}
		return []PurgeCall{func(ctx context.Context, c pb.AdminServiceClient) (*pb.PurgeStatus, error) {
			resp, err := c.PurgePrefix(ctx, req)
			return resp.GetStatus(), err
		}}, nil
	}
	req := &pb.PurgeRequest{RequestId: id, Url: "http://" + r.Host + r.URL.RequestURI(), Soft: soft}
	return []PurgeCall{func(ctx context.Context, c pb.AdminServiceClient) (*pb.PurgeStatus, error) {
		resp, err := c.Purge(ctx, req)
		return resp.GetStatus(), err
	}}, nil
}

// purgeStatusCode maps a failed call to the PURGE's answer.
func purgeStatusCode(err error, controlPlane string) (int, string) {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.InvalidArgument:
		return http.StatusBadRequest, st.Message()
	case codes.Unauthenticated, codes.PermissionDenied:
		return http.StatusUnauthorized, "the control plane refused the token: " + st.Message()
	case codes.AlreadyExists:
		return http.StatusConflict, st.Message()
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests, "the control plane refuses: " + st.Message()
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return http.StatusServiceUnavailable, fmt.Sprintf("control plane at %s cannot be reached; nothing was purged: %s", controlPlane, st.Message())
	}
	return http.StatusBadGateway, st.Message()
}

func purgeError(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		w.Header().Set("WWW-Authenticate", `Bearer realm="shardcache purge"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// tokenShaped reports whether t could be an admin token: 8 to 512
// printable ASCII characters, no spaces.
func tokenShaped(t string) bool {
	if len(t) < 8 || len(t) > 512 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}
