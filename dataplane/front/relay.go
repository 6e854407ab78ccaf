package front

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/coalesce"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/internal/wait"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// isHot counts a request for key and says whether its rate at this node is
// above the policy's (or the node's) threshold.
func (f *Front) isHot(key string, p *policy.Policy) bool {
	if f.cfg.Hot == nil {
		return false
	}
	threshold := f.cfg.HotThreshold
	if p.HotThreshold > 0 {
		threshold = p.HotThreshold
	}
	if f.cfg.Hot.ObserveRate(key) < float64(threshold) {
		return false
	}
	f.cfg.Metrics.Hot.WithLabelValues("hot_request").Inc()
	return true
}

// serveHotCopy answers from a local copy of a hot object, when the copy
// is fresh as the request asks (its no-cache, max-age and min-fresh obeyed
// as the owner obeys them): else the owner decides.
func (f *Front) serveHotCopy(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy) bool {
	e, ok := f.cfg.HotCopies.Get(key)
	if !ok || !f.cfg.Answers.Usable(e) {
		return false
	}
	req := httpcache.ForRequest(r.Header)
	if httpcache.Decide(e.Age(time.Now()), e.Lifetime, e.Header, req, 0, p.Targeted...) != httpcache.UseFresh {
		return false
	}
	f.cfg.Metrics.Hot.WithLabelValues("copy_hit").Inc()
	f.cfg.Answers.Answer(w, r, e, nil, httpcache.CacheHit)
	return true
}

// relayHeader is the header of a client request relayed to a peer.
func (f *Front) relayHeader(r *http.Request) http.Header {
	return hop.RelayHeader(r, f.cfg.ID, f.epoch())
}

// relay forwards r to owner and copies the answer; for a hot key it keeps a
// local copy of a small, storable answer. It reports false when the owner
// could not be reached and nothing was written.
func (f *Front) relay(w http.ResponseWriter, r *http.Request, owner *pb.Member, key string, p *policy.Policy, hot bool) bool {
	// The relay timeout bounds the wait for the owner's header and each
	// wait for its body, never the transfer (see package wait).
	timeout := cmp.Or(p.RelayTimeout, f.cfg.RelayTimeout)
	ctx, watch := wait.Start(r.Context(), timeout, timeout)
	defer watch.Stop()
	ctx = httptrace.WithClientTrace(ctx, reply.PassInterim(w))
	sent := time.Now()
	resp, err := f.cfg.Peers.Forward(ctx, owner.GetPeerAddress(), r, f.relayHeader(r))
	f.cfg.Metrics.PeerDuration.Observe(time.Since(sent).Seconds())
	if errors.Is(err, relay.ErrHeaderTooLarge) {
		// The client's request, not the owner, is at fault.
		http.Error(w, "shardcache: the request's header fields are too large to pass on", http.StatusRequestHeaderFieldsTooLarge)
		return true
	}
	if errors.Is(err, relay.ErrPeerDown) {
		f.cfg.Metrics.PeerReqs.WithLabelValues(owner.GetId(), "skipped").Inc()
		return false
	}
	if errors.Is(err, relay.ErrRefused) {
		f.cfg.Metrics.PeerReqs.WithLabelValues(owner.GetId(), "refused").Inc()
		return false
	}
	if err != nil {
		f.cfg.Metrics.PeerReqs.WithLabelValues(owner.GetId(), "error").Inc()
		if r.Context().Err() == nil {
			f.cfg.Logger.Warn("relay failed; serving locally", "owner", owner.GetId(), "err", err)
		}
		return false
	}
	watch.Answered()
	resp.Body = watch.Body(resp.Body)
	defer resp.Body.Close()
	f.cfg.Metrics.PeerReqs.WithLabelValues(owner.GetId(), metrics.StatusClass(resp.StatusCode)).Inc()
	httpcache.RemoveHopByHop(resp.Header)
	// An owner behind this node's purges may answer with what this node
	// purged: pass it on (the purge is not complete yet), keep no copy.
	behind := f.cfg.Bans.Behind(hop.PurgeRevision(resp.Header))
	if hot && !behind && r.Method == http.MethodGet && f.admitHotCopy(w, r, key, p, resp) {
		return true
	}
	var body io.Reader = resp.Body
	if resp.ContentLength >= 0 && resp.ContentLength <= relayBuffered {
		// A small answer is read whole before anything is written: an
		// owner that dies mid-answer is then routed around like one that
		// never answered, and the client sees no broken response.
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			f.cfg.Metrics.PeerReqs.WithLabelValues(owner.GetId(), "error").Inc()
			f.cfg.Logger.Warn("relay broke off; serving locally", "owner", owner.GetId(), "err", err)
			return false
		}
		body = bytes.NewReader(b)
		coalesce.Hold(r, int64(len(b))) // whole and small: one write
	}
	reply.CopyHeader(w.Header(), resp.Header)
	w.Header()["Cache-Status"] = append(w.Header()["Cache-Status"], f.relayStatus)
	w.WriteHeader(resp.StatusCode)
	nb, broken := reply.Pass(w, body)
	f.countPeerIn(nb)
	if broken {
		f.cfg.Metrics.PeerReqs.WithLabelValues(owner.GetId(), "broken").Inc()
	}
	return true
}

// relayBuffered is the largest relayed answer read whole before it is
// passed on.
const relayBuffered = 64 << 10

// countPeerIn records body bytes received over the peer hop.
func (f *Front) countPeerIn(nb int64) {
	f.cfg.Metrics.Totals.PeerBytes.Add(uint64(nb))
	f.cfg.Metrics.PeerBytes.WithLabelValues("in").Add(float64(nb))
}

// admitHotCopy answers w from a relayed response and keeps a copy, when the
// response is small and may be stored. It reports false, having read and
// written nothing, when it may not.
func (f *Front) admitHotCopy(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, resp *http.Response) bool {
	received := time.Now()
	lifetime, ok := owner.StoreLifetime(p, r, resp.StatusCode, resp.Header, received, f.cfg.HotCopyMaxObject)
	// A copy is kept only of an answer that is the same for every client:
	// one negotiated by content coding (Vary) is not.
	if !ok || resp.ContentLength < 0 || resp.ContentLength > f.cfg.HotCopyMaxObject || resp.Header.Get("Vary") != "" || resp.Header.Get("Content-Encoding") != "" {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, resp.ContentLength))
	if err != nil || int64(len(body)) != resp.ContentLength {
		// The owner's answer broke off: pass on what came, as a plain relay would.
		reply.CopyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
		return true
	}
	f.countPeerIn(int64(len(body)))
	kept := resp.Header.Clone()
	kept.Del("Cache-Status") // the copy answers with this node's own
	e := &store.Entry{Key: key, URL: purge.EntryURL(r), Status: resp.StatusCode, Header: kept, Body: body, Received: received,
		InitialAge: httpcache.InitialAge(resp.Header, received, received), Lifetime: lifetime, Size: int64(len(body)), Length: int64(len(body))}
	if f.cfg.HotCopies.Set(e) {
		f.cfg.Metrics.Hot.WithLabelValues("copy_admitted").Inc()
	}
	// Answer as the owner did (its X-Cache and X-Cache-Node), not as a copy.
	reply.CopyHeader(w.Header(), resp.Header)
	w.Header()["Cache-Status"] = append(w.Header()["Cache-Status"], f.relayStatus)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	coalesce.Hold(r, int64(len(body)))
	w.Write(body)
	return true
}
