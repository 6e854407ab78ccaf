package owner

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// fillFromPeer asks another node for key; nil when it cannot answer (the
// caller then goes to the origin). A hot key's later owner asks the first
// owner, which fills from the origin if it must. A handoff asks the key's
// owner in the previous epoch for its stored copy only
// (only-if-cached): it never sends that node to the origin.
func (o *Owner) fillFromPeer(ctx context.Context, r *http.Request, from *pb.Member, handoff bool) *http.Response {
	get := *r // Forward reads only the method, URL and host; the header is h
	get.Method = http.MethodGet
	h := o.relayHeader(r)
	for _, f := range httpcache.ConditionalFields {
		h.Del(f) // a fill brings the whole object, as the origin sent it
	}
	h.Del("Accept-Encoding")
	wait := o.cfg.RelayTimeout
	if handoff {
		h.Set(hop.HandoffField, "1")
		h.Set("Cache-Control", "only-if-cached")
		wait = handoffTimeout
	}
	resp, err := o.forward(ctx, from, &get, h, wait)
	if err != nil {
		if handoff {
			o.cfg.Metrics.Handoffs.WithLabelValues("error").Inc()
		}
		return nil
	}
	if o.cfg.Bans.Behind(hop.PurgeRevision(resp.Header)) || resp.StatusCode >= 500 {
		resp.Body.Close()
		if handoff {
			o.cfg.Metrics.Handoffs.WithLabelValues("miss").Inc()
		}
		return nil
	}
	if handoff {
		o.cfg.Metrics.Handoffs.WithLabelValues("hit").Inc()
	} else {
		o.cfg.Metrics.Hot.WithLabelValues("replica_fill").Inc()
		resp.Header.Del("Age")
	}
	resp.Header.Del("X-Cache")
	resp.Header.Del("X-Cache-Node")
	return resp
}

// handoffTimeout bounds the wait for a handoff's answer (see fillFromPeer).
const handoffTimeout = 2 * time.Second

// handoffFrom is the node to ask for key before the origin: its owner in
// the previous epoch, within the handoff window of a change; nil if none.
func (o *Owner) handoffFrom(key string, r *http.Request) *pb.Member {
	if r.Header.Get(hop.HandoffField) != "" {
		return nil
	}
	return o.cfg.Routes.Load().HandoffFrom(key, o.cfg.ID, o.cfg.HandoffWindow, time.Now())
}

// forward sends a peer request to m. wait bounds the wait for the answer's
// header; its body is read at the caller's pace, within ctx.
func (o *Owner) forward(ctx context.Context, m *pb.Member, r *http.Request, h http.Header, wait time.Duration) (*http.Response, error) {
	fctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(wait, cancel)
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
