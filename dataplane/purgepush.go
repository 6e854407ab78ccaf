package dataplane

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/shardcache/shardcache/dataplane/purge"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// The node's side of purges (package purge keeps the bans and sweeps):
// installing the ones the control plane pushes, deleting exact ones at
// once, keeping the state after a sweep, and each purge's result.

// purgeAckWithin is how long a purge's result waits for the sweep to
// finish before it is sent with the count so far and sweeping set.
const purgeAckWithin = 2 * time.Second

// PurgeRevision is the highest purge revision this node has applied.
func (n *Node) PurgeRevision() int64 { return n.bans.Revision() }

// CaughtUp says the purges missed while the node was away are applied:
// objects stored before this run may be served again, as far as the bans
// allow.
func (n *Node) CaughtUp() { n.owner.CaughtUp() }

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
		if !p.GetSoft() {
			n.purgeNow(b)
		}
		added = append(added, b)
		if at := p.GetCreatedAt(); at != nil {
			n.metrics.PurgeApply.Observe(max(0, time.Since(at.AsTime()).Seconds()))
		}
	}
	if n.purgeFile != "" && len(ps) > 0 {
		if err := n.bans.Save(n.purgeFile); err != nil {
			n.log.Error("saving purge state; a restart re-applies the purges", "err", err)
		}
	}
	n.metrics.PurgeRevision.Set(float64(n.bans.Revision()))
	n.metrics.Bans.Set(float64(len(n.bans.Pending())))
	if len(added) == 0 {
		return
	}
	select {
	case n.bans.Wake <- struct{}{}:
	default:
	}
	rev := n.bans.Revision()
	// Nothing the purges match is served from here on: the applied
	// revision goes to the control plane now, and answers for them all
	// (it names no purge); each one's count follows once swept.
	report(&pb.PurgeResult{NodeId: n.cfg.ID, RevisionApplied: rev})
	for _, b := range added {
		n.metrics.Purges.WithLabelValues(strings.ToLower(strings.TrimPrefix(b.Purge().GetKind().String(), "PURGE_KIND_"))).Inc()
		if b.Soft() {
			continue // it removes nothing: the applied revision said it all
		}
		n.tasks.Go("purge-report", func() {
			t := time.NewTimer(purgeAckWithin)
			defer t.Stop()
			res := &pb.PurgeResult{NodeId: n.cfg.ID, PurgeId: b.Purge().GetId(), RevisionApplied: rev}
			select {
			case <-b.Swept():
			case <-t.C:
				res.Sweeping = true
			case <-n.tasks.Context().Done():
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
		k := p.URLKeys(r)
		keys = k[:]
	default:
		n.owner.DropCopies(nil)
		return
	}
	idx := n.owner.Index()
	for _, k := range keys {
		if idx.Delete(k) {
			b.Removed().Add(1)
		}
	}
	n.owner.DropCopies(keys)
}

// swept is told of the bans a sweep applied: it keeps the state and
// logs the sweep.
func (n *Node) swept(applied []*purge.Ban) {
	n.metrics.Bans.Set(float64(len(n.bans.Pending())))
	if n.purgeFile != "" {
		if err := n.bans.Save(n.purgeFile); err != nil {
			n.log.Error("saving purge state", "err", err)
		}
	}
	var removed int64
	for _, b := range applied {
		removed += b.Removed().Load()
	}
	n.log.Info("purges swept", "purges", len(applied), "objects_removed", removed, "revision", n.bans.Revision())
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
