package front

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/internal/wait"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// relay forwards req to member m, the key's owner, and passes on its
// answer; with keep, the owner (package owner) keeps a local copy of a
// small, storable one: of a hot key, or of any while the copies have
// room. It reports false when the owner could not be reached (or refused
// the request) and nothing was written.
func (f *Front) relay(w http.ResponseWriter, req *owner.Request, m *pb.Member, keep, hot bool) (owner.Outcome, bool) {
	r := req.HTTP
	// The relay timeout bounds the wait for the owner's header and each
	// wait for its body, never the transfer (see package wait).
	timeout := cmp.Or(req.Policy.RelayTimeout, f.cfg.RelayTimeout)
	ctx, watch := wait.Start(r.Context(), timeout, timeout)
	defer watch.Stop()
	ctx = httptrace.WithClientTrace(ctx, reply.PassInterim(w))
	var epoch uint64
	if req.Routes != nil {
		epoch = req.Routes.Epoch.GetEpoch()
	}
	h := hop.RelayHeader(r, f.cfg.ID, epoch)
	if req.Account != nil {
		h[hop.AccountField] = []string{"1"} // the owner's account comes back with its answer
	}
	sent := time.Now()
	resp, err := f.cfg.Peers.Forward(ctx, m.GetPeerAddress(), r, h)
	took := time.Since(sent)
	f.cfg.Metrics.PeerDuration.Observe(took.Seconds())
	if a := req.Account; a != nil {
		c := owner.Call{Kind: owner.CallPeer, Node: m.GetId(), FirstByte: took}
		if err != nil {
			c.Error = err.Error()
		} else {
			c.Status, c.Account = resp.StatusCode, owner.ParseAccount(resp.Header.Get(hop.AccountField))
		}
		a.Add(c)
	}
	switch {
	case errors.Is(err, relay.ErrHeaderTooLarge):
		// The client's request, not the owner, is at fault.
		http.Error(w, "shardcache: the request's header fields are too large to pass on", http.StatusRequestHeaderFieldsTooLarge)
		return owner.Outcome{Served: true}, true
	case errors.Is(err, relay.ErrPeerDown):
		f.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), "skipped").Inc()
		return owner.Outcome{}, false
	case errors.Is(err, relay.ErrRefused):
		f.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), "refused").Inc()
		return owner.Outcome{}, false
	case err != nil:
		f.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), "error").Inc()
		if r.Context().Err() == nil {
			f.cfg.Logger.Warn("relay failed; serving locally", "owner", m.GetId(), "err", err)
		}
		return owner.Outcome{}, false
	}
	watch.Answered()
	resp.Body = watch.Body(resp.Body)
	defer resp.Body.Close()
	f.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), metrics.StatusClass(resp.StatusCode)).Inc()
	httpcache.RemoveHopByHop(resp.Header)
	delete(resp.Header, hop.AccountField) // read above; the owner's, not the client's
	out := relayedOutcome(resp.Header)
	if keep && f.cfg.Owner.Keep(w, *req, resp, hot) {
		return out, true
	}
	hop.PurgeRevision(resp.Header) // the owner's, for Keep; not for the client
	var body io.Reader = resp.Body
	hasBody := r.Method != http.MethodHead && reply.BodyAllowed(resp.StatusCode)
	if n := resp.ContentLength; n >= 0 && n <= relayBuffered && hasBody {
		// A small answer is read whole before anything is written: an
		// owner that dies mid-answer is then routed around like one that
		// never answered, and the client sees no broken response. It is
		// read into a buffer of the pool, whose bytes are passed on before
		// it is returned.
		buf := relayBuffers.Get().(*[relayBuffered + 1]byte)
		defer relayBuffers.Put(buf)
		b := buf[:n]
		_, err := io.ReadFull(resp.Body, b)
		if err == nil {
			// The end is read too: a keep-alive connection goes back to its
			// pool once its answer is read to the end.
			if end := reply.ReadEnd(resp.Body, buf[n:]); end != nil {
				err = fmt.Errorf("the owner's answer does not end at its Content-Length (%d): %w", n, end)
			}
		}
		if err != nil {
			f.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), "error").Inc()
			f.cfg.Logger.Warn("relay broke off; serving locally", "owner", m.GetId(), "err", err)
			return owner.Outcome{}, false
		}
		body = bytes.NewReader(b)
	}
	reply.CopyHeader(w.Header(), resp.Header)
	w.Header()["Cache-Status"] = append(w.Header()["Cache-Status"], f.relayStatus)
	w.WriteHeader(resp.StatusCode)
	nb, broken := reply.Pass(w, body)
	f.cfg.Metrics.Totals.PeerBytes.Add(uint64(nb))
	f.cfg.Metrics.PeerBytes.WithLabelValues("in").Add(float64(nb))
	if broken {
		f.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), "broken").Inc()
	}
	return out, true
}

// relayBuffered is the largest relayed answer read whole before it is
// passed on.
const relayBuffered = 64 << 10

// relayBuffers hold relayed answers read whole.
var relayBuffers = sync.Pool{New: func() any { return new([relayBuffered + 1]byte) }}

// relayedOutcome is the Outcome of an answer an owner sent over the peer
// hop, as its fields say (the owner's X-Cache, X-Cache-Node and its
// Cache-Status member, the one naming it after any of the origin's), to
// count and log it as the owner's own would be.
func relayedOutcome(h http.Header) owner.Outcome {
	out := owner.Outcome{Served: true, Source: owner.SourcePeer, Node: h.Get("X-Cache-Node")}
	out.Member.Cache = h.Get("X-Cache")
	if m, _ := httpcache.MemberOf(h["Cache-Status"], out.Node); m != nil {
		_, out.Member.Stored = m["stored"]
		out.Member.Detail = m["detail"] // the owner's reason
		if ttl, err := strconv.ParseInt(m["ttl"], 10, 64); err == nil {
			out.Member.TTL, out.Member.HasTTL = time.Duration(ttl)*time.Second, true
		}
	}
	return out
}
