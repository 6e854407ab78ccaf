package front

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/registry"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/slice"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
	"github.com/shardcache/shardcache/sdk/redact"
)

// servePeer is the peer listener's handler: requests relayed by other nodes,
// served from this node's store and never relayed again. It serves only
// requests that carry the hop marker and, on a mutual-TLS peer hop, come
// with a certificate of the cluster CA naming a member of the ring; the
// rest are refused, logged and counted. HTTP/1.1 is served only over the
// mutual TLS: in plain text (loopback, or a network said trusted) the hop
// is h2c alone, which no browser speaks, so a page that rebinds a name to
// the peer address cannot reach it. The checks are the same whichever
// class of connection a request came on, a keep-alive HTTP/1.1 one or a
// stream of an HTTP/2 one (package relay).
func (f *Front) servePeer(w http.ResponseWriter, r *http.Request) {
	rt := f.cfg.Routes.Load() // the epoch the request is served by, loaded once
	if reason, code, msg := f.peerRefusal(r, rt); reason != "" {
		switch reason {
		case "http1":
			w.Header().Set("Connection", "close")
		case "not_a_member":
			// A node that has just joined relays before this node has
			// the epoch naming it: ask for the epoch it has seen.
			f.epochHint(r, rt)
		}
		f.refusePeer(w, r, reason, code, msg)
		return
	}
	f.serveLocal(w, r, rt)
}

// PeerTrusted reports whether the peer listener serves r (servePeer's
// checks): only then is its trace context a member's and continued. A
// request that is refused starts a trace of the node's own, sampled as
// the node decides, whoever sent it.
func (f *Front) PeerTrusted(r *http.Request) bool {
	reason, _, _ := f.peerRefusal(r, f.cfg.Routes.Load())
	return reason == ""
}

// peerRefusal is why servePeer refuses r under rt, with the status and
// the message to answer; "" when r is served.
func (f *Front) peerRefusal(r *http.Request, rt *routes.Table) (reason string, code int, msg string) {
	if r.ProtoMajor != 2 && r.TLS == nil {
		return "http1", http.StatusHTTPVersionNotSupported, "peer listener: HTTP/1.1 only over mutual TLS; in plain text nodes speak h2c to each other"
	}
	if r.Header.Get(hop.Marker) == "" {
		return "no_hop", http.StatusBadRequest, "peer listener: only requests relayed by shardcache nodes are served here"
	}
	if f.cfg.PeerMTLS {
		// The handshake checked the certificate against the cluster CA;
		// it must also name a member of the ring.
		id := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			id = relay.Identity(r.TLS.PeerCertificates[0])
		}
		if id == "" || !rt.Member(id) {
			return "not_a_member", http.StatusForbidden, fmt.Sprintf("peer listener: the certificate names %q, not a member of the ring", id)
		}
	}
	return "", 0, ""
}

// epochHint asks the control plane for the epoch a peer request says its
// sender serves, when it is newer than this node's: this node's push is
// late.
func (f *Front) epochHint(r *http.Request, rt *routes.Table) {
	seen, err := strconv.ParseUint(r.Header.Get(hop.EpochField), 10, 64)
	if err == nil && (rt == nil || seen > rt.Epoch.GetEpoch()) {
		f.cfg.RequestEpoch(seen)
	}
}

// serveLocal serves a peer request that passed servePeer's checks: its hop
// fields, now believed, become the request's typed facts.
func (f *Front) serveLocal(w http.ResponseWriter, r *http.Request, rt *routes.Table) {
	now := time.Now()
	if r.ProtoMajor == 2 && f.cfg.PeerSendTimeout > 0 {
		// A stream whose peer opens no window would hold its handler,
		// and what it reads from, for as long as the connection lives.
		w = &peerSend{ResponseWriter: w, rc: http.NewResponseController(w), wait: f.cfg.PeerSendTimeout}
	}
	if f.draining.Load() {
		f.lastPeer.Store(now.UnixNano())
	}
	// Meanwhile the request is served here, never relayed again.
	f.epochHint(r, rt)
	if r.Header.Get(hop.HotKeysField) != "" {
		f.serveHotKeys(w, r)
		return
	}
	p := f.cfg.Policies.Load().Match(policy.Host(r), r.URL.Path)
	sl, err := slice.ParseHeader(r.Header)
	if err != nil {
		http.Error(w, "peer listener: "+err.Error(), http.StatusBadRequest)
		return
	}
	req := &owner.Request{HTTP: r, Key: p.Key(hop.Scheme(r), r), Policy: p, Routes: rt, Now: now, Slice: sl,
		Hop: owner.Hop{From: r.Header.Get(hop.Marker), Handoff: r.Header.Get(hop.HandoffField) != ""}}
	if sl != nil {
		req.Key = sl.Key(req.Key)
	}
	if len(p.Registries) > 0 {
		ref, err := registry.Parse(r, p) // as the receiving node parsed it
		if err != nil {
			registry.WriteError(w, err, http.StatusBadRequest, "")
			return
		}
		req.Registry, req.Key = ref, ref.Key()
	}
	if r.Header.Get(hop.InvalidateField) != "" {
		f.cfg.Owner.Invalidate(*req, nil)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if f.cfg.Tracer != nil {
		annotate(r.Context(), attribute.String("shardcache.node", f.cfg.ID))
	}
	req.From = f.replicaOf(req)
	if r.Header.Get(hop.AccountField) != "" {
		req.Account = &owner.Account{} // the relaying node's full log stream asks for it
	}
	rec := reply.NewRecorder(w)
	f.cfg.Owner.Serve(rec, *req)
	f.cfg.Metrics.Totals.PeerAnswers.Add(1)
	f.cfg.Metrics.PeerBytes.WithLabelValues("out").Add(float64(rec.Bytes))
	if req.Hop.Handoff && rec.Status < 300 && !rec.Broken {
		f.cfg.Metrics.Totals.HandoffAnswers.Add(1)
	}
	rec.AbortIfBroken()
}

// serveHotKeys answers a peer's hop.HotKeysField request: this node's hot
// keys, hottest first, but those holding a client's credential. Any member
// may ask, and these are the keys of this node's own clients: a key a
// policy builds from a cookie or a credential field, or one whose query
// carries a credential (redact.Secret), is left out. Pre-copy could not
// rebuild the first kind from the URL anyway; handoff still moves both.
func (f *Front) serveHotKeys(w http.ResponseWriter, r *http.Request) {
	limit, err := strconv.Atoi(r.Header.Get(hop.HotKeysField))
	if err != nil || limit <= 0 {
		http.Error(w, "peer listener: "+hop.HotKeysField+" wants a positive count", http.StatusBadRequest)
		return
	}
	out := []*hotkey.Key{}
	if f.cfg.Hot != nil {
		for _, k := range f.cfg.HotKeys.Hottest(f.cfg.Hot, hotkey.ListMax) {
			if len(out) == limit {
				break
			}
			if k.Shown != k.Key || redact.Query(k.Key) != k.Key || redact.Query(k.URI) != k.URI {
				continue
			}
			out = append(out, k)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	hotkey.Encode(w, out) // within what a peer's Decode takes
}

// refusePeer answers a peer request that is not served, counts it by
// reason and logs why: the first refusalLogBurst refusals of each
// refusalLogEvery, since whoever reaches the listener may send refused
// requests as fast as it likes. The rest are only counted (PeerRefused);
// the next line logged says how many went unlogged.
func (f *Front) refusePeer(w http.ResponseWriter, r *http.Request, reason string, code int, msg string) {
	f.cfg.Metrics.PeerRefused.WithLabelValues(reason).Inc()
	w.Header().Set(hop.RefusedField, reason)
	if unlogged, ok := f.refusals.allow(time.Now()); ok {
		f.cfg.Logger.Warn("refused a peer request", "reason", reason, "remote", r.RemoteAddr, "detail", msg, "unlogged_before", unlogged)
	}
	http.Error(w, msg, code)
}

// At most refusalLogBurst refused peer requests are logged each
// refusalLogEvery.
const (
	refusalLogBurst = 10
	refusalLogEvery = time.Minute
)

// refusalLog bounds the lines refusePeer writes: refusalLogBurst in each
// refusalLogEvery window.
type refusalLog struct {
	mu       sync.Mutex
	start    time.Time // the window's start
	logged   int       // lines written in the window
	unlogged int       // refusals not logged since the last line
}

// allow reports whether a refusal at now is logged, and how many were not
// since the last one that was.
func (l *refusalLog) allow(now time.Time) (unlogged int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= refusalLogEvery || now.Before(l.start) {
		l.start, l.logged = now, 0
	}
	if l.logged == refusalLogBurst {
		l.unlogged++
		return 0, false
	}
	l.logged++
	unlogged, l.unlogged = l.unlogged, 0
	return unlogged, true
}

// peerSend renews an HTTP/2 peer stream's write deadline as its answer is
// written: a peer that takes no byte for wait has the stream reset, but an
// answer takes as long as it keeps moving. The deadline is pushed at most
// once an eighth of wait (at most a second): each push is a message to the
// connection's goroutine.
type peerSend struct {
	http.ResponseWriter
	rc      *http.ResponseController
	wait    time.Duration
	renewed time.Time
}

func (s *peerSend) renew() {
	if now := time.Now(); now.Sub(s.renewed) >= min(s.wait/8, time.Second) {
		s.renewed = now
		s.rc.SetWriteDeadline(now.Add(s.wait))
	}
}

func (s *peerSend) WriteHeader(code int) {
	s.renew()
	s.ResponseWriter.WriteHeader(code)
}

func (s *peerSend) Write(b []byte) (int, error) {
	s.renew()
	return s.ResponseWriter.Write(b)
}

func (s *peerSend) Flush() {
	s.renew()
	s.rc.Flush()
}

// Unwrap lets http.ResponseController reach the stream's writer.
func (s *peerSend) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// replicaOf is a hot key's first owner when this node is one of its later
// owners (a request relayed here to share the key's load): the owner to
// fill from before the origin. Nil otherwise.
func (f *Front) replicaOf(req *owner.Request) *pb.Member {
	rt, p := req.Routes, req.Policy
	if rt == nil || req.Slice != nil || p.ReplicationFactor < 2 || req.Hop.Handoff {
		return nil
	}
	var buf [4]*pb.Member
	owners := rt.Owners(buf[:0], req.Key, p.ReplicationFactor)
	for i, o := range owners {
		if i > 0 && o.GetId() == f.cfg.ID {
			return owners[0]
		}
	}
	return nil
}
