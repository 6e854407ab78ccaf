package controlplane

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Purges are recorded under purges/<request id>; their mod revision orders
// them, and nodes apply them in that order. Each node's acknowledgement is
// kept under purge-acks/<request id>/<node>. The leader deletes records past
// the retention and keeps, in purges-floor, the newest purge it deleted: a
// node that has not applied it missed purges that are gone, and must drop
// everything it stored before it reconnects.
func (s *state) purgesPrefix() string             { return s.prefix + "purges/" }
func (s *state) purgeKey(id string) string        { return s.prefix + "purges/" + id }
func (s *state) purgeFloorKey() string            { return s.prefix + "purges-floor" }
func (s *state) purgeAcksPrefix(id string) string { return s.prefix + "purge-acks/" + id + "/" }
func (s *state) purgeAckKey(id, node string) string {
	return s.purgeAcksPrefix(id) + node
}

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
}

// Purge records an exact purge of a URL or a cache key and waits for the
// nodes' acknowledgements.
func (a *adminService) Purge(ctx context.Context, req *pb.PurgeRequest) (*pb.PurgeResponse, error) {
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL}
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
	st, err := a.purge(ctx, purgeRequest{req.GetRequestId(), req.GetWait(), p}, bad)
	return &pb.PurgeResponse{Status: st}, err
}

// PurgePrefix records a purge of a host and path prefix.
func (a *adminService) PurgePrefix(ctx context.Context, req *pb.PurgePrefixRequest) (*pb.PurgePrefixResponse, error) {
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: strings.ToLower(req.GetHost()), PathPrefix: req.GetPathPrefix()}
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
	st, err := a.purge(ctx, purgeRequest{req.GetRequestId(), req.GetWait(), p}, bad)
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
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: req.GetTag()}
	var bad []string
	switch t := req.GetTag(); {
	case t == "":
		bad = append(bad, "tag is empty")
	case strings.ContainsAny(t, " ,"):
		bad = append(bad, fmt.Sprintf("tag %q holds a space or comma: purge one tag at a time", t))
	default:
		bad = append(bad, checkText("tag", t)...)
	}
	st, err := a.purge(ctx, purgeRequest{req.GetRequestId(), req.GetWait(), p}, bad)
	return &pb.PurgeTagResponse{Status: st}, err
}

// GetPurge returns a recorded purge and its acknowledgements, after waiting
// up to the request's wait for the pending ones.
func (a *adminService) GetPurge(ctx context.Context, req *pb.GetPurgeRequest) (*pb.GetPurgeResponse, error) {
	if !validRequestID.MatchString(req.GetRequestId()) {
		return nil, status.Errorf(codes.InvalidArgument, "request id %q: use 1 to 128 letters, digits, '.', '_', ':' or '-'", req.GetRequestId())
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
	st, err := a.awaitAcks(ctx, p, wait)
	return &pb.GetPurgeResponse{Status: st}, err
}

// purge validates, records and awaits one purge.
func (a *adminService) purge(ctx context.Context, req purgeRequest, bad []string) (*pb.PurgeStatus, error) {
	if req.id != "" && !validRequestID.MatchString(req.id) {
		bad = append(bad, fmt.Sprintf("request id %q: use 1 to 128 letters, digits, '.', '_', ':' or '-'", req.id))
	}
	wait, err := purgeWait(req.wait, defaultPurgeWait)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, status.Error(codes.InvalidArgument, "purge refused: "+strings.Join(bad, "; "))
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
	st, err := a.awaitAcks(ctx, recorded, wait)
	span.SetAttributes(attribute.Int("shardcache.purge.acknowledged", len(st.GetResults())),
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

// recordPurge stores p under its request id, unless the id is recorded
// already: then the recorded purge is returned if it is the same purge, and
// ErrPurgeConflict if not. The returned purge carries its revision.
func (s *state) recordPurge(ctx context.Context, p *pb.Purge) (*pb.Purge, error) {
	b, err := proto.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding purge %s: %w", p.GetId(), err)
	}
	key := s.purgeKey(p.GetId())
	resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, etcdErr(err, "recording purge %s", p.GetId())
	}
	if resp.Succeeded {
		out := proto.Clone(p).(*pb.Purge)
		out.Revision = resp.Header.Revision
		return out, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, fmt.Errorf("%w: recording purge %s raced with its deletion", ErrEtcd, p.GetId())
	}
	old, err := decodePurge(kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		return nil, err
	}
	if !samePurge(old, p) {
		return nil, fmt.Errorf("%w: %s was %s", ErrPurgeConflict, p.GetId(), describePurge(old))
	}
	return old, nil
}

func samePurge(a, b *pb.Purge) bool {
	return a.GetKind() == b.GetKind() && a.GetUrl() == b.GetUrl() && a.GetKey() == b.GetKey() &&
		a.GetHost() == b.GetHost() && a.GetPathPrefix() == b.GetPathPrefix() && a.GetTag() == b.GetTag()
}

// describePurge names what a purge matches, for messages.
func describePurge(p *pb.Purge) string {
	switch p.GetKind() {
	case pb.PurgeKind_PURGE_KIND_URL:
		if p.GetKey() != "" {
			return "a purge of key " + p.GetKey()
		}
		return "a purge of " + p.GetUrl()
	case pb.PurgeKind_PURGE_KIND_PREFIX:
		return "a purge of prefix " + p.GetPathPrefix() + hostScope(p.GetHost())
	default:
		return "a purge of tag " + p.GetTag()
	}
}

// decodePurge decodes a purge record; rev, the record's mod revision, is
// its revision (the floor, 0, keeps the revision it holds).
func decodePurge(b []byte, rev int64) (*pb.Purge, error) {
	p := &pb.Purge{}
	if err := proto.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("decoding purge: %w", err)
	}
	if rev != 0 {
		p.Revision = rev
	}
	return p, nil
}

// purge returns the recorded purge with request id id.
func (s *state) purge(ctx context.Context, id string) (*pb.Purge, error) {
	resp, err := s.kv.Get(ctx, s.purgeKey(id))
	if err != nil {
		return nil, etcdErr(err, "reading purge %s", id)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %q (never recorded, or older than the retention)", ErrPurgeNotFound, id)
	}
	return decodePurge(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// purges returns every recorded purge in revision order, the floor, and the
// revision read at.
func (s *state) purges(ctx context.Context) ([]*pb.Purge, *pb.Purge, int64, error) {
	resp, err := s.kv.Get(ctx, s.purgesPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		return nil, nil, 0, etcdErr(err, "reading purges")
	}
	out := make([]*pb.Purge, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		p, err := decodePurge(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, nil, 0, err
		}
		out = append(out, p)
	}
	fresp, err := s.kv.Get(ctx, s.purgeFloorKey(), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, nil, 0, etcdErr(err, "reading the purge floor")
	}
	var floor *pb.Purge
	if len(fresp.Kvs) > 0 {
		if floor, err = decodePurge(fresp.Kvs[0].Value, 0); err != nil {
			return nil, nil, 0, err
		}
	}
	return out, floor, resp.Header.Revision, nil
}

// recordAck stores a node's result for a purge. It lives as long as the purge.
func (s *state) recordAck(ctx context.Context, r *pb.PurgeResult) error {
	b, err := proto.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding purge result: %w", err)
	}
	if _, err := s.kv.Put(ctx, s.purgeAckKey(r.GetPurgeId(), r.GetNodeId()), string(b)); err != nil {
		return etcdErr(err, "recording %s's result of purge %s", r.GetNodeId(), r.GetPurgeId())
	}
	return nil
}

// purgeStatus compares the registered nodes with the acknowledgements of p,
// read at one revision, which it returns for a watch to start after.
func (s *state) purgeStatus(ctx context.Context, p *pb.Purge) (*pb.PurgeStatus, int64, error) {
	resp, err := s.kv.Txn(ctx).Then(
		clientv3.OpGet(s.purgeAcksPrefix(p.GetId()), clientv3.WithPrefix()),
		clientv3.OpGet(s.statusPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, 0, etcdErr(err, "reading acknowledgements of purge %s", p.GetId())
	}
	acks := map[string]*pb.PurgeResult{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		r := &pb.PurgeResult{}
		if proto.Unmarshal(kv.Value, r) == nil {
			acks[r.GetNodeId()] = r
		}
	}
	st := &pb.PurgeStatus{Purge: p}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		n := &pb.Node{}
		if proto.Unmarshal(kv.Value, n) != nil {
			continue
		}
		id := n.GetMember().GetId()
		switch r, ok := acks[id]; {
		case ok:
			st.Results = append(st.Results, r)
		case n.GetPurgeRevision() >= p.GetRevision():
			// Applied, but its result was lost with a broken session.
			st.Results = append(st.Results, &pb.PurgeResult{NodeId: id, PurgeId: p.GetId(), RevisionApplied: n.GetPurgeRevision()})
		default:
			st.Pending = append(st.Pending, id)
		}
	}
	slices.SortFunc(st.Results, func(x, y *pb.PurgeResult) int { return strings.Compare(x.GetNodeId(), y.GetNodeId()) })
	slices.Sort(st.Pending)
	st.Complete = len(st.Pending) == 0
	return st, resp.Header.Revision, nil
}

// awaitAcks returns p's status once every registered node acknowledged it,
// or when wait has passed (or the caller gave up) with the nodes pending.
// Nodes that leave meanwhile stop being waited for.
func (a *adminService) awaitAcks(ctx context.Context, p *pb.Purge, wait time.Duration) (*pb.PurgeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	wctx, stopWatch := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stopWatch()
	var acks, nodes clientv3.WatchChan
	var last *pb.PurgeStatus
	for {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		st, rev, err := a.state.purgeStatus(rctx, p)
		rcancel()
		switch {
		case err != nil && last == nil:
			return nil, toStatus(err)
		case err == nil:
			last = st
		}
		if last.GetComplete() || ctx.Err() != nil {
			return last, nil
		}
		if acks == nil {
			from := clientv3.WithRev(rev + 1)
			acks = a.state.kv.Watch(wctx, a.state.purgeAcksPrefix(p.GetId()), clientv3.WithPrefix(), from)
			nodes = a.state.kv.Watch(wctx, a.state.statusPrefix(), clientv3.WithPrefix(), from)
		}
		select {
		case <-ctx.Done():
			return last, nil
		case wr, ok := <-acks:
			if !ok || wr.Err() != nil {
				return last, nil
			}
		case wr, ok := <-nodes:
			if !ok || wr.Err() != nil {
				return last, nil
			}
		}
	}
}

// floorPrefix starts the id of the purge a node behind the floor gets.
const floorPrefix = "floor-"

// purgeHub is this replica's view of the recorded purges, kept current by
// an etcd watch, so that a session sends a node the purges after the
// revision it applied.
type purgeHub struct {
	notify notifier

	mu     sync.Mutex
	loaded bool
	purges []*pb.Purge // by revision
	floor  *pb.Purge
}

func newPurgeHub() *purgeHub { return &purgeHub{notify: newNotifier()} }

// since returns the purges a node that applied revision r needs, in order,
// and whether the hub has loaded. A node behind the floor first gets a
// purge of everything it stored before it applies it.
func (h *purgeHub) since(r int64) ([]*pb.Purge, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*pb.Purge
	if f := h.floor; f != nil && r < f.GetRevision() {
		out = append(out, &pb.Purge{Id: floorPrefix + fmt.Sprint(f.GetRevision()), Kind: pb.PurgeKind_PURGE_KIND_PREFIX,
			PathPrefix: "/", CreatedAt: f.GetCreatedAt(), Revision: f.GetRevision()})
	}
	i, _ := slices.BinarySearchFunc(h.purges, r+1, func(p *pb.Purge, rev int64) int { return cmp.Compare(p.GetRevision(), rev) })
	return append(out, h.purges[i:]...), h.loaded
}

func (h *purgeHub) load(ps []*pb.Purge, floor *pb.Purge) {
	h.mu.Lock()
	h.purges, h.floor, h.loaded = ps, floor, true
	h.mu.Unlock()
	h.notify.wake()
}

// apply folds one watch response into the view.
func (h *purgeHub) apply(s *state, events []*clientv3.Event) {
	h.mu.Lock()
	for _, ev := range events {
		key := string(ev.Kv.Key)
		switch {
		case key == s.purgeFloorKey() && ev.Type == clientv3.EventTypePut:
			if f, err := decodePurge(ev.Kv.Value, 0); err == nil {
				h.floor = f
			}
		case !strings.HasPrefix(key, s.purgesPrefix()):
		case ev.Type == clientv3.EventTypePut:
			if p, err := decodePurge(ev.Kv.Value, ev.Kv.ModRevision); err == nil {
				h.purges = append(h.purges, p) // watch events come in revision order
			}
		case ev.Type == clientv3.EventTypeDelete:
			h.purges = slices.DeleteFunc(h.purges, func(p *pb.Purge) bool { return s.purgeKey(p.GetId()) == key })
		}
	}
	h.mu.Unlock()
	h.notify.wake()
}

// watchPurges keeps the purge hub current until ctx ends. purges/ and
// purges-floor share the watched prefix "purges".
func (s *Server) watchPurges(ctx context.Context) error {
	return s.loadAndWatch(ctx, "purges", s.cfg.Prefix+"purges", func(ctx context.Context) (int64, error) {
		ps, floor, at, err := s.state.purges(ctx)
		if err == nil {
			s.purgeHub.load(ps, floor)
		}
		return at, err
	}, func(evs []*clientv3.Event) { s.purgeHub.apply(s.state, evs) })
}

// compactPurges deletes, while this replica leads, the purges older than
// the retention and those past the most kept, with their acknowledgements,
// and raises the floor to the newest deleted.
func (s *Server) compactPurges(ctx context.Context, guard clientv3.Cmp) {
	t := time.NewTicker(s.cfg.PurgeCompactInterval)
	defer t.Stop()
	for {
		if err := s.compactPurgesOnce(ctx, guard); err != nil && ctx.Err() == nil {
			s.log.Warn("compacting purges; retrying later", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) compactPurgesOnce(ctx context.Context, guard clientv3.Cmp) error {
	ps, _, _, err := s.state.purges(ctx)
	if err != nil {
		return err
	}
	cut := time.Now().Add(-s.cfg.PurgeRetention)
	n := 0
	for n < len(ps) && (len(ps)-n > s.cfg.PurgeMaxRecords || ps[n].GetCreatedAt().AsTime().Before(cut)) {
		n++
	}
	for len(ps[:n]) > 0 {
		batch := ps[:min(n, 32)] // etcd caps the operations of one transaction
		newest := batch[len(batch)-1]
		floor, _ := proto.Marshal(&pb.Purge{Id: newest.GetId(), CreatedAt: newest.GetCreatedAt(), Revision: newest.GetRevision()})
		ops := []clientv3.Op{clientv3.OpPut(s.state.purgeFloorKey(), string(floor))}
		for _, p := range batch {
			ops = append(ops, clientv3.OpDelete(s.state.purgeKey(p.GetId())),
				clientv3.OpDelete(s.state.purgeAcksPrefix(p.GetId()), clientv3.WithPrefix()))
		}
		resp, err := s.etcd.Txn(ctx).If(guard).Then(ops...).Commit()
		if err != nil {
			return etcdErr(err, "deleting old purges")
		}
		if !resp.Succeeded {
			return errLostLeadership
		}
		s.log.Info("deleted old purges", "count", len(batch), "floor_revision", newest.GetRevision())
		ps, n = ps[len(batch):], n-len(batch)
	}
	return nil
}
