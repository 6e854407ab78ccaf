package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Limits of purge requests.
const (
	defaultPurgeWait = 10 * time.Second
	maxPurgeWait     = 60 * time.Second
	maxPurgeField    = 4096
)

// validRequestID keeps request ids usable as etcd key segments.
var validRequestID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._:-]{0,127}$`)

// purgeRequest is what the three purge RPCs have in common.
type purgeRequest struct {
	id   string
	wait *durationpb.Duration
	p    *pb.Purge
	// exceptionsOnly leaves plain acknowledgements out of the results.
	exceptionsOnly bool
}

// Purge records an exact purge of a URL or a cache key and waits for the
// nodes' acknowledgements.
func (a *adminService) Purge(ctx context.Context, req *pb.PurgeRequest) (*pb.PurgeResponse, error) {
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Soft: req.GetSoft()}
	var bad []string
	switch u, k := req.GetUrl(), req.GetKey(); {
	case u != "" && k != "":
		bad = append(bad, "give url or key, not both")
	case k != "":
		p.Key = k
		bad = append(bad, checkText("key", k)...)
	default:
		norm, err := normalizePurgeURL(u)
		if err != nil {
			bad = append(bad, err.Error())
		}
		p.Url = norm
	}
	st, err := a.purge(ctx, purgeRequest{req.GetRequestId(), req.GetWait(), p, req.GetExceptionsOnly()}, bad)
	return &pb.PurgeResponse{Status: st}, err
}

// PurgePrefix records a purge of a host and path prefix.
func (a *adminService) PurgePrefix(ctx context.Context, req *pb.PurgePrefixRequest) (*pb.PurgePrefixResponse, error) {
	// The host as entries record it (policy.Host): lower case, no trailing dot.
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: strings.ToLower(strings.TrimRight(req.GetHost(), ".")),
		PathPrefix: policy.NormalEscapes(req.GetPathPrefix()), Soft: req.GetSoft()} // as entries spell their URLs
	var bad []string
	switch pp := req.GetPathPrefix(); {
	case pp == "":
		bad = append(bad, "path_prefix is empty")
	case !strings.HasPrefix(pp, "/"):
		bad = append(bad, fmt.Sprintf("path_prefix %q must start with /", pp))
	case pp == "/" && !req.GetAll():
		bad = append(bad, `path_prefix "/" purges everything`+hostScope(p.Host)+`: set all to confirm`)
	default:
		bad = append(bad, checkText("path_prefix", pp)...)
	}
	if h := p.Host; h != "" && (strings.ContainsAny(h, "/:@?# ") || checkText("host", h) != nil) {
		bad = append(bad, fmt.Sprintf("host %q: give a host name without scheme, port or path", h))
	}
	st, err := a.purge(ctx, purgeRequest{req.GetRequestId(), req.GetWait(), p, req.GetExceptionsOnly()}, bad)
	return &pb.PurgePrefixResponse{Status: st}, err
}

func hostScope(host string) string {
	if host == "" {
		return " on every host"
	}
	return " on " + host
}

// PurgeTag records a purge of every object carrying a tag.
func (a *adminService) PurgeTag(ctx context.Context, req *pb.PurgeTagRequest) (*pb.PurgeTagResponse, error) {
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: req.GetTag(), Soft: req.GetSoft()}
	var bad []string
	switch t := req.GetTag(); {
	case t == "":
		bad = append(bad, "tag is empty")
	case strings.ContainsAny(t, " ,"):
		bad = append(bad, fmt.Sprintf("tag %q holds a space or comma: purge one tag at a time", t))
	default:
		bad = append(bad, checkText("tag", t)...)
	}
	st, err := a.purge(ctx, purgeRequest{req.GetRequestId(), req.GetWait(), p, req.GetExceptionsOnly()}, bad)
	return &pb.PurgeTagResponse{Status: st}, err
}

// GetPurge returns a recorded purge and its acknowledgements, after waiting
// up to the request's wait for the pending ones.
func (a *adminService) GetPurge(ctx context.Context, req *pb.GetPurgeRequest) (*pb.GetPurgeResponse, error) {
	if !validRequestID.MatchString(req.GetRequestId()) {
		return nil, status.Errorf(codes.InvalidArgument, "request id %s: use 1 to 128 letters, digits, '.', '_', ':' or '-'", quoteCut(req.GetRequestId()))
	}
	wait, err := purgeWait(req.GetWait(), 0)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	p, err := a.state.purge(rctx, req.GetRequestId())
	cancel()
	if err != nil {
		return nil, toStatus(err)
	}
	st, err := a.awaitAcks(ctx, p, wait, req.GetExceptionsOnly())
	return &pb.GetPurgeResponse{Status: st}, err
}

// purge validates, records and awaits one purge.
func (a *adminService) purge(ctx context.Context, req purgeRequest, bad []string) (*pb.PurgeStatus, error) {
	if req.id != "" && !validRequestID.MatchString(req.id) {
		bad = append(bad, fmt.Sprintf("request id %s: use 1 to 128 letters, digits, '.', '_', ':' or '-'", quoteCut(req.id)))
	}
	wait, err := purgeWait(req.wait, defaultPurgeWait)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, status.Error(codes.InvalidArgument, "purge refused: "+strings.Join(bad, "; "))
	}
	who := caller(ctx)
	if a.caller != nil {
		who = a.caller(ctx)
	}
	if ok, retry := a.purgeLimit.take(who, time.Now()); !ok {
		a.purgesThrottled.Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "too many purges from %s: at most %g a second; retry in %s", who,
			a.purgeLimit.rate, retry.Round(time.Millisecond))
	}
	p := req.p
	p.Id = req.id
	if p.Id == "" {
		p.Id = newRequestID()
	}
	p.CreatedAt = timestamppb.Now()
	ctx, span := a.tracer.Start(ctx, "purge", trace.WithAttributes(attribute.String("shardcache.purge.id", p.GetId()),
		attribute.String("shardcache.purge.target", describePurge(p))))
	defer span.End()
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	recorded, err := a.state.recordPurge(wctx, p)
	cancel()
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
		return nil, toStatus(err)
	}
	a.purgesRecorded.WithLabelValues(strings.ToLower(strings.TrimPrefix(p.GetKind().String(), "PURGE_KIND_"))).Inc()
	st, err := a.awaitAcks(ctx, recorded, wait, req.exceptionsOnly)
	span.SetAttributes(attribute.Int("shardcache.purge.acknowledged", int(st.GetAcknowledged())),
		attribute.StringSlice("shardcache.purge.pending", st.GetPending()))
	return st, err
}

func purgeWait(d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	w := d.AsDuration()
	if w < 0 || w > maxPurgeWait || d.CheckValid() != nil {
		return 0, status.Errorf(codes.InvalidArgument, "wait %s: give 0 to %s", w, maxPurgeWait)
	}
	if w == 0 {
		return def, nil
	}
	return w, nil
}

// normalizePurgeURL checks that u is an absolute http or https URL and
// returns it with the host in lower case and no default port.
func normalizePurgeURL(u string) (string, error) {
	if u == "" {
		return "", errors.New("url is empty: give an absolute http or https URL, or a key")
	}
	if err := checkText("url", u); err != nil {
		return "", errors.New(err[0])
	}
	pu, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("url %q: %v", u, err)
	}
	if pu.Scheme != "http" && pu.Scheme != "https" || pu.Host == "" || pu.Hostname() == "" {
		return "", fmt.Errorf("url %q: give an absolute http or https URL with a host", u)
	}
	if pu.Fragment != "" || pu.User != nil {
		return "", fmt.Errorf("url %q: a cache key has no user info or fragment", u)
	}
	pu.Host = strings.ToLower(pu.Host)
	if port := pu.Port(); (pu.Scheme == "http" && port == "80") || (pu.Scheme == "https" && port == "443") {
		pu.Host = pu.Hostname()
	}
	if pu.Path == "" {
		pu.Path = "/"
	}
	// The escapes spelled as a node spells a request's (policy.NormalPath,
	// policy.NormalEscapes).
	policy.NormalPath(pu)
	if n := policy.NormalEscapes(pu.EscapedPath()); n != pu.EscapedPath() {
		pu.RawPath = n
	}
	pu.RawQuery = policy.NormalEscapes(pu.RawQuery)
	return pu.String(), nil
}

// checkText refuses control characters and oversized values, which no
// stored URL, key or tag holds.
func checkText(field, v string) []string {
	if len(v) > maxPurgeField {
		return []string{fmt.Sprintf("%s is %d bytes; at most %d", field, len(v), maxPurgeField)}
	}
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		return []string{fmt.Sprintf("%s %q holds a control character at byte %d", field, v, i)}
	}
	return nil
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// awaitAcks returns p's status once every node waited for has applied it,
// or when wait has passed (or the caller gave up) with the nodes pending.
// It is answered from the replica's view of the watermark records
// (ackview.go): waiting costs no etcd request, and one read of the
// exceptions makes the final status.
func (a *adminService) awaitAcks(ctx context.Context, p *pb.Purge, wait time.Duration, exceptionsOnly bool) (*pb.PurgeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Every node registered before the purge is waited for: the view
	// must have seen etcd up to the purge's record.
	a.acks.catchUp(ctx, a.state.kv, p.GetRevision())
	wake, unsubscribe := a.acks.notify.subscribe()
	defer unsubscribe()
	accepted := p.GetCreatedAt().AsTime()
	var p50, p99 time.Duration
	for {
		acked, total := a.acks.count(p.GetRevision())
		now := time.Now()
		if p50 == 0 && total > 0 && acked*2 >= total {
			p50 = max(now.Sub(accepted), time.Microsecond)
		}
		if p99 == 0 && total > 0 && acked*100 >= total*99 {
			p99 = max(now.Sub(accepted), time.Microsecond)
		}
		if acked == total || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-wake:
		}
	}
	var results map[string]*pb.PurgeResult
	if a.acks.mayHaveExceptions(p) {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		var err error
		results, err = a.state.exceptions(rctx, p.GetId())
		rcancel()
		if err != nil {
			return nil, toStatus(err)
		}
	}
	st := a.acks.purgeStatus(p, results, !exceptionsOnly)
	if p50 > 0 {
		st.AckP50 = durationpb.New(p50)
	}
	if p99 > 0 {
		st.AckP99 = durationpb.New(p99)
	}
	return st, nil
}
