package dataplane

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// The node's side of purges (package purge keeps the bans): installing the
// ones the control plane pushes, deleting exact ones at once, the sweep
// that applies bans to every stored object, and each purge's result.

// purgeAckWithin is how long a purge's result waits for the sweep to
// finish before it is sent with the count so far and sweeping set.
const purgeAckWithin = 2 * time.Second

// PurgeRevision is the highest purge revision this node has applied.
func (n *Node) PurgeRevision() int64 { return n.bans.Revision() }

// ApplyPurges applies purges pushed by the control plane, in order, and
// reports each one's result: once the sweep has applied it to every stored
// object, or after purgeAckWithin with the count so far. Once it returns,
// nothing the purges match is served.
func (n *Node) ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult)) {
	var added []*purge.Ban
	for _, p := range ps {
		res := &pb.PurgeResult{NodeId: n.cfg.ID, PurgeId: p.GetId()}
		if p.GetRevision() <= n.bans.Revision() {
			res.RevisionApplied = n.bans.Revision()
			report(res) // applied before a reconnect; the result was lost
			continue
		}
		b, err := purge.NewBan(p, time.Now().UnixNano())
		if err != nil {
			// A purge this node cannot read must not hold back the ones after it.
			n.bans.Skip(p.GetRevision())
			n.log.Error("cannot apply purge", "purge", p.GetId(), "err", err)
			res.RevisionApplied, res.Error = n.bans.Revision(), err.Error()
			report(res)
			continue
		}
		n.bans.Add(b, p.GetRevision())
		n.purgeNow(b)
		added = append(added, b)
	}
	if n.purgeFile != "" && len(ps) > 0 {
		if err := n.bans.Save(n.purgeFile); err != nil {
			n.log.Error("saving purge state; a restart re-applies the purges", "err", err)
		}
	}
	n.caughtUp.Store(true)
	n.metrics.purgeRevision.Set(float64(n.bans.Revision()))
	n.metrics.bans.Set(float64(len(n.bans.Pending())))
	if len(added) == 0 {
		return
	}
	select {
	case n.bans.Wake <- struct{}{}:
	default:
	}
	rev := n.bans.Revision()
	for _, b := range added {
		n.metrics.purges.WithLabelValues(strings.ToLower(strings.TrimPrefix(b.Purge().GetKind().String(), "PURGE_KIND_"))).Inc()
		n.background("purge-report", func() {
			t := time.NewTimer(purgeAckWithin)
			defer t.Stop()
			res := &pb.PurgeResult{NodeId: n.cfg.ID, PurgeId: b.Purge().GetId(), RevisionApplied: rev}
			select {
			case <-b.Swept():
			case <-t.C:
				res.Sweeping = true
			case <-n.fillCtx.Done():
				return // the node stops: no session is left to carry it
			}
			res.ObjectsRemoved = b.Removed().Load()
			report(res)
		})
	}
}

// purgeNow removes at once what a ban names exactly, and the hot copies it
// may cover.
func (n *Node) purgeNow(b *purge.Ban) {
	var keys []string
	switch {
	case b.Key() != "":
		keys = []string{b.Key()}
	case b.URL() != "":
		i := strings.IndexByte(b.URL(), '/')
		r := &http.Request{Method: http.MethodGet, Host: b.URL()[:i], Header: http.Header{}}
		var err error
		if r.URL, err = url.ParseRequestURI(b.URL()[i:]); err != nil {
			return
		}
		p := n.policies.Load().Match(b.URL()[:i], r.URL.Path)
		keys = []string{p.Key("http", r), p.Key("https", r)}
	default:
		if n.hotCopies != nil {
			n.hotCopies.Clear()
		}
		return
	}
	for _, k := range keys {
		if e, ok := n.store.Peek(k); ok && n.store.Delete(k) {
			b.Removed().Add(1)
			if e.Status == varyMarker {
				n.variants.Delete(k)
			}
		}
		if n.hotCopies != nil {
			n.hotCopies.Delete(k)
		}
	}
}

// usable reports whether a stored entry may be served: no ban matches it,
// and, until the first session of this run has brought the purges the
// node missed, it was stored by this run.
func (n *Node) usable(e *store.Entry) bool {
	if !n.caughtUp.Load() && e.Received.Before(n.started) {
		return false
	}
	return n.bans.Match(e) == nil
}

// sweepBans applies the bans to every stored object, until ctx ends.
func (n *Node) sweepBans(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.bans.Wake:
		}
		pending := n.bans.Pending()
		if len(pending) == 0 {
			continue
		}
		// Fills that began before the newest ban store objects it matches:
		// the sweep starts once they are done.
		newest := pending[len(pending)-1].InstalledAt()
		for n.inflight.startedBefore(newest) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		n.store.Keys(func(k string) bool {
			if e, ok := n.store.Peek(k); ok {
				if b := n.bans.Match(e); b != nil && n.store.Delete(k) {
					b.Removed().Add(1)
					if e.Status == varyMarker {
						n.variants.Delete(k)
					}
				}
			}
			return ctx.Err() == nil
		})
		if ctx.Err() != nil {
			return
		}
		n.bans.Drop(pending)
		n.metrics.bans.Set(float64(len(n.bans.Pending())))
		if n.purgeFile != "" {
			if err := n.bans.Save(n.purgeFile); err != nil {
				n.log.Error("saving purge state", "err", err)
			}
		}
		var removed int64
		for _, b := range pending {
			removed += b.Removed().Load()
		}
		n.log.Info("purges swept", "purges", len(pending), "objects_removed", removed, "revision", n.bans.Revision())
	}
}

// peerBehind reports whether a peer's answer comes from a node that had
// applied fewer purges than this one, and removes the marker.
func (n *Node) peerBehind(h http.Header) bool {
	v := h.Get(relay.PurgeRevisionHeader)
	h.Del(relay.PurgeRevisionHeader)
	rev, err := strconv.ParseInt(v, 10, 64)
	return err != nil || rev < n.bans.Revision()
}

// inflight tracks when the fills running now began.
type inflight struct {
	mu     sync.Mutex
	next   uint64
	active map[uint64]int64
}

// begin records a fill starting now; the returned function ends it.
func (f *inflight) begin() func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active == nil {
		f.active = map[uint64]int64{}
	}
	id := f.next
	f.next++
	f.active[id] = time.Now().UnixNano()
	return func() {
		f.mu.Lock()
		delete(f.active, id)
		f.mu.Unlock()
	}
}

// startedBefore reports whether a fill that began before t still runs.
func (f *inflight) startedBefore(t int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.active {
		if s < t {
			return true
		}
	}
	return false
}

// restorePurges loads the purge state kept in dir.
func (n *Node) restorePurges(dir string) error {
	n.purgeFile = filepath.Join(dir, purge.StateFile)
	if err := n.bans.Load(n.purgeFile); err != nil {
		return err
	}
	if len(n.bans.Pending()) > 0 {
		n.bans.Wake <- struct{}{}
	}
	return nil
}
