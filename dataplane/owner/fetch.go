package owner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"time"

	"github.com/shardcache/shardcache/dataplane/flight"
	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/internal/wait"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/slice"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// fill is one fetch of a key and what comes of it: the stages after
// collapse (fetch, admit, answer) are its methods. A storable response is
// written to the store by a goroutine of its own, which this request and
// every request collapsed onto it follow as readers: a client that hangs
// up or reads slowly delays no one else.
type fill struct {
	// serving is a copy of the request's: the fill may outlive the
	// request's stages (a goroutine storing the response); its outcome is
	// the request's once the fill returns.
	serving
	// call is the collapse this fill leads, nil when it leads none; fk
	// its flight key. share is what the fill gives the requests collapsed
	// onto it (settle), then what it answers itself.
	call    *flight.Call[*fillShare]
	fk      string
	share   *fillShare
	settled bool
	then    leadAnswer
	// plan, when set, is a range fill (partial.go): a range is asked for
	// and its 206 stored as the key's part.
	plan *partPlan
	// ctx bounds the fetch (see fetch); release ends what it holds once
	// the response is done with, by this request or by the goroutine it
	// is handed to (handed).
	ctx        context.Context
	watch      *wait.Watch
	release    func()
	handed     bool
	resp       *http.Response
	fromOrigin bool
	// requested is when the request went out, received when the answer
	// came: the response's age is reckoned between them.
	requested, received time.Time
}

// fill fetches the key from the origin (or, for a hot key's later owner,
// from the first owner; within a handoff window, from its previous owner)
// and decides what it becomes (admit); answerFill answers from it. s.stale,
// when set, is the stored response being revalidated: its validators make
// the request conditional, a 304 refreshes it, and an origin failure may
// serve it (stale-if-error). A slice is fetched with a Range request of
// its own bytes, conditional (If-Range) on the version of the object it
// belongs to.
func (s *serving) fill(plan *partPlan) *fill {
	f := &fill{serving: *s, plan: plan}
	f.run()
	return f
}

func (f *fill) run() {
	if f.fetch() {
		f.admit()
	}
}

// lead is the fill of a collapse's leader (flight.Group.Do, on call c):
// it returns what the requests collapsed onto it share; the leader then
// answers from the fill (answerFill), as they do from the share.
func (f *fill) lead(c *flight.Call[*fillShare]) (*fillShare, bool, bool) {
	f.call = c
	f.run()
	sh := f.share
	return sh, sh != nil, sh != nil && sh.wr != nil
}

// fetch is the stage that gets the response; false when the request was
// answered already (a failure, a stale response served on error, a
// pre-copy without a peer's copy).
func (f *fill) fetch() bool {
	// The fill outlives a client that hangs up (others may be waiting on
	// it), but not the node. The origin timeout bounds the wait for the
	// answer's header and each wait for its body, never the transfer: an
	// object that keeps coming is fetched and stored whole, however long.
	timeout := cmp.Or(f.p.OriginTimeout, f.cfg.OriginTimeout)
	ctx, watch := wait.Start(context.WithoutCancel(f.r.Context()), timeout, timeout)
	stop := context.AfterFunc(f.cfg.Tasks.Context(), watch.Stop)
	// Purges wait for fills that began before them; see purge.Sweep.
	endFill := f.cfg.Inflight.Begin()
	f.watch, f.ctx = watch, httptrace.WithClientTrace(ctx, reply.PassInterim(f.w))
	f.release = func() {
		endFill()
		watch.Stop()
		stop()
		if f.resp != nil {
			f.resp.Body.Close()
		}
	}
	if f.stale == nil && f.plan == nil {
		if from := f.req.From; from != nil {
			f.resp = f.fromPeer(from, false)
		} else if prev := f.handoffFrom(); prev != nil {
			f.resp = f.fromPeer(prev, true)
		}
	}
	if f.resp == nil && f.req.Hop.Precopy {
		return false // a pre-copy takes what a peer has, never the origin
	}
	f.fromOrigin = f.resp == nil
	f.requested = time.Now()
	var err error
	switch {
	case f.fromOrigin && f.req.Registry != nil:
		f.resp, err = f.fromRegistry()
	case f.fromOrigin:
		f.resp, err = f.cfg.Origin.Fetch(f.ctx, f.r, f.p, true, f.originFields())
	}
	f.received = time.Now()
	if a := f.req.Account; a != nil && f.fromOrigin {
		a.OriginFirstByte = f.received.Sub(f.requested)
		a.Record(CallOrigin, "", f.resp, err, a.OriginFirstByte)
	}
	if (err != nil || f.stale != nil && f.upstreamFailed()) && !f.failed(err) {
		return false
	}
	watch.Answered()
	f.resp.Body = watch.Body(f.resp.Body)
	if f.req.Registry != nil && !f.ingested() {
		return false
	}
	if f.fromOrigin {
		f.cfg.Metrics.Totals.OriginRequests.Add(1)
		f.cfg.Metrics.OriginReqs.WithLabelValues("fill", metrics.StatusClass(f.resp.StatusCode)).Inc()
	}
	httpcache.RemoveHopByHop(f.resp.Header)
	// The node's internal fields are its own: an origin's (or, after
	// fromPeer read them, a peer's) are never stored, where they would
	// speak for this owner on the hop (a purge revision, a refusal).
	hop.Strip(f.resp.Header, nil)
	if sl := f.req.Slice; sl != nil {
		if err := sl.FromOrigin(f.resp); err != nil {
			code := http.StatusBadGateway
			if errors.Is(err, slice.ErrChanged) {
				code = http.StatusPreconditionFailed
			} else {
				f.cfg.Logger.Warn("origin answer cannot be sliced", "key", f.keyShown(f.key), "err", errText(err))
			}
			f.settle(&fillShare{err: err, code: code})
			f.then = leadAnswer{kind: answerText, code: code, msg: "shardcache: " + err.Error()}
			return false
		}
	}
	return true
}

// originFields are the fields set on the origin request: the stale
// response's validators (RFC 9111 4.3.1), a slice's range, or a range
// fill's.
func (f *fill) originFields() http.Header {
	switch {
	case f.plan != nil:
		return f.plan.ask
	case f.req.Slice != nil:
		return f.req.Slice.OriginHeader()
	case f.stale == nil:
		return nil
	}
	h := http.Header{}
	if et := f.stale.Header.Values("Etag"); len(et) > 0 {
		h["If-None-Match"] = et
	}
	if lm := f.stale.Header.Get("Last-Modified"); lm != "" {
		h.Set("If-Modified-Since", lm)
	}
	return h
}

// upstreamFailed reports whether the answer to a revalidation is a
// failure a stored response may be served for: a 5xx, or a mirror's 429
// (a registry's rate limit).
func (f *fill) upstreamFailed() bool {
	return f.resp.StatusCode >= 500 || f.req.Registry != nil && f.resp.StatusCode == http.StatusTooManyRequests
}

// failed answers an origin that failed (err) or answered 5xx to a
// revalidation: with the stale response where stale-if-error allows, or
// where the origin closed the connection without answering (the node is
// disconnected, RFC 9111 4.2.4) and neither the policy nor the response
// forbids it; else with an error that every collapsed request shares. It
// reports whether the fill goes on (a 5xx that must be passed on).
func (f *fill) failed(err error) bool {
	// What a purge applied since the fill began has removed is not served
	// stale either.
	if why := f.staleReason(err); why != "" && f.cfg.Bans.Match(f.stale) == nil {
		st := f.stale
		result := "error"
		if err == nil {
			result = metrics.StatusClass(f.resp.StatusCode)
			f.resp.Body.Close()
		}
		f.cfg.Metrics.OriginReqs.WithLabelValues("fill", result).Inc()
		f.settle(&fillShare{e: st, status: httpcache.CacheStale, reason: why, req: f.r.Header})
		f.reason = why
		f.then = leadAnswer{kind: answerEntry, e: st, status: httpcache.CacheStale}
		return false
	}
	if err == nil {
		return true // the origin's 5xx is the answer
	}
	f.cfg.Metrics.OriginReqs.WithLabelValues("fill", "error").Inc()
	f.cfg.Logger.Warn("origin request failed", "key", f.keyShown(f.key), "err", errText(err))
	msg, code := "origin unreachable", http.StatusBadGateway
	switch {
	case errors.Is(err, httpcache.ErrTransferCoding):
		msg = "origin answer not decodable" // it answered: a 502 whatever is stored
	case f.stale != nil:
		code = http.StatusGatewayTimeout // a stored response it may not serve
	}
	f.settle(&fillShare{err: fmt.Errorf("%s: %w", msg, err), code: code})
	f.then = leadAnswer{kind: answerError, code: code, err: err, msg: msg}
	return false
}

// staleReason is the rule by which the stored response being revalidated
// is served stale for the origin's failure (err, or a 5xx when err is
// nil): stale-if-error, or stale-if-disconnected; "" when none allows it.
func (f *fill) staleReason(err error) string {
	st := f.stale
	switch {
	case st == nil || f.unconfirmed || f.p.AuthorizeEach:
		return ""
	case f.req.Registry != nil:
		return httpcache.ReasonStaleIfError // a mirror's stored tag is served whenever its registry fails
	case httpcache.StaleOnError(st.Age(f.received), st.Lifetime, st.Header, f.r.Header, f.p.StaleIfError, f.p.Targeted...):
		return httpcache.ReasonStaleIfError
	case f.p.StaleIfDisconnected && httpcache.Disconnected(err) && httpcache.StaleDisconnected(st.Header, f.p.Targeted...):
		return httpcache.ReasonStaleIfDisconnected
	}
	return ""
}

// fromPeer asks another node for the key; nil when it cannot answer (the
// fill then goes to the origin). A hot key's later owner asks the first
// owner, which fills from the origin if it must. A handoff asks the key's
// owner in the previous epoch for its stored copy only (only-if-cached):
// it never sends that node to the origin.
func (f *fill) fromPeer(from *pb.Member, handoff bool) *http.Response {
	get := *f.r // Forward reads only the method, URL and host; the header is h
	get.Method = http.MethodGet
	h := relayHeader(&f.req, f.cfg.ID)
	for _, name := range httpcache.ConditionalFields {
		h.Del(name) // a fill brings the whole object, as the origin sent it
	}
	h.Del("Accept-Encoding")
	timeout := f.cfg.RelayTimeout
	if handoff {
		h.Set(hop.HandoffField, "1")
		h.Set("Cache-Control", "only-if-cached")
		timeout = handoffTimeout
	}
	sent := f.req.Account.Now()
	resp, err := f.forward(f.ctx, from, &get, h, timeout)
	if a := f.req.Account; a != nil {
		kind := CallFirstOwner
		if handoff {
			kind = CallHandoff
		}
		a.Record(kind, from.GetId(), resp, err, time.Since(sent))
	}
	if err != nil {
		if handoff {
			f.cfg.Metrics.Handoffs.WithLabelValues("error").Inc()
		}
		return nil
	}
	// A peer behind on purges or failing has nothing this node may serve.
	// One answering from a stale copy (served while it revalidates, after
	// a soft purge) has nothing to store as fresh: a first owner's is
	// passed on unstored (admit), since it fetches the object again
	// already; the next request fills from its refetch.
	x := staleAnswer(resp.Header)
	stale := x != ""
	if f.cfg.Bans.Behind(hop.PurgeRevision(resp.Header)) || resp.StatusCode >= 500 || stale && handoff {
		resp.Body.Close()
		if handoff {
			f.cfg.Metrics.Handoffs.WithLabelValues("miss").Inc()
		}
		return nil
	}
	if stale {
		f.passedStale = x
	}
	if handoff {
		f.cfg.Metrics.Handoffs.WithLabelValues("hit").Inc()
	} else if !stale {
		// The first owner's Age stays: the object's age goes on from
		// there, never a new lifetime for an object near its end.
		f.cfg.Metrics.Hot.WithLabelValues("replica_fill").Inc()
	}
	// The peer's own account of its answer, not the object's.
	resp.Header.Del("X-Cache")
	resp.Header.Del("X-Cache-Node")
	resp.Header.Del("Cache-Status")
	return resp
}

// handoffTimeout bounds the wait for a handoff's answer (see fromPeer).
const handoffTimeout = 2 * time.Second

// handoffFrom is the node to ask for the key before the origin: its owner
// in the previous epoch, within the handoff window of a change; nil if
// none, and for a handoff request itself.
func (f *fill) handoffFrom() *pb.Member {
	if f.req.Hop.Handoff {
		return nil
	}
	return f.req.Routes.HandoffFrom(f.key, f.cfg.ID, f.cfg.HandoffWindow, f.req.Now)
}

// forward sends a peer request to m. timeout bounds the wait for the
// answer's header; its body is read at the caller's pace, within ctx.
func (o *Owner) forward(ctx context.Context, m *pb.Member, r *http.Request, h http.Header, timeout time.Duration) (*http.Response, error) {
	fctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(timeout, cancel)
	resp, err := o.cfg.Peers.Forward(fctx, m.GetPeerAddress(), r, h)
	timer.Stop()
	if err != nil {
		cancel()
		result := "error"
		if errors.Is(err, relay.ErrPeerDown) {
			result = "skipped"
		}
		o.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), result).Inc()
		return nil, err
	}
	o.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), metrics.StatusClass(resp.StatusCode)).Inc()
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// relayHeader is the header of a peer request the node self sends for
// req, at the epoch req is routed by.
func relayHeader(req *Request, self string) http.Header {
	var epoch uint64
	if req.Routes != nil {
		epoch = req.Routes.Epoch.GetEpoch()
	}
	return hop.RelayHeader(req.HTTP, self, epoch)
}

// cancelOnClose ends a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
