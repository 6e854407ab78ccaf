package purge

import (
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/metrics"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Target is what purges act on at once: the stored objects, through their
// index, and the hot copies of objects owned elsewhere.
type Target interface {
	Index() Index
	// DropCopies drops the hot copies of keys; nil keys: every copy.
	DropCopies(keys []string)
}

// Applier is a node's side of the purges the control plane pushes (Set
// keeps the bans and Sweep applies them to what is stored): installing
// them, deleting what they name exactly at once, keeping the state after a
// sweep, and reporting each one's result. Its fields are set once, before
// the first Apply.
type Applier struct {
	NodeID   string
	Bans     *Set
	Target   Target
	Policies *atomic.Pointer[policy.Set] // to build the keys a URL purge names
	Metrics  *metrics.Set
	Tasks    *tasks.Group
	Logger   *slog.Logger

	file string // the kept state; "" until Restore
}

// purgeAckWithin is how long a purge's result waits for the sweep to
// finish before the count so far is sent, with sweeping set.
const purgeAckWithin = 2 * time.Second

// Apply applies purges pushed by the control plane, in order, and
// reports each one's result: what it removed at once (an exact purge's
// keys), ahead of the applied revision, and its whole count once the
// sweep has applied it to every stored object, when that says more
// (after purgeAckWithin, the count so far as well, marked sweeping). Once
// it returns, nothing the purges match is served.
func (a *Applier) Apply(ps []*pb.Purge, report func(*pb.PurgeResult)) {
	var added []*Ban
	for _, p := range ps {
		res := &pb.PurgeResult{NodeId: a.NodeID, PurgeId: p.GetId()}
		if p.GetRevision() <= a.Bans.Revision() {
			res.RevisionApplied = a.Bans.Revision()
			report(res) // applied before a reconnect; the result was lost
			continue
		}
		b, err := NewBan(p, time.Now().UnixNano())
		if err != nil {
			// A purge this node cannot read must not hold back the ones after it.
			a.Bans.Skip(p.GetRevision())
			a.Logger.Error("cannot apply purge", "purge", p.GetId(), "err", err)
			res.RevisionApplied, res.Error = a.Bans.Revision(), err.Error()
			report(res)
			continue
		}
		a.Bans.Add(b, p.GetRevision())
		a.purgeNow(b)
		added = append(added, b)
		if at := p.GetCreatedAt(); at != nil {
			a.Metrics.PurgeApply.Observe(max(0, time.Since(at.AsTime()).Seconds()))
		}
	}
	if a.file != "" && len(ps) > 0 {
		if err := a.Bans.Save(a.file); err != nil {
			a.Logger.Error("saving purge state; a restart re-applies the purges", "err", err)
		}
	}
	a.Metrics.PurgeRevision.Set(float64(a.Bans.Revision()))
	a.Metrics.Bans.Set(float64(len(a.Bans.Pending())))
	if len(added) == 0 {
		return
	}
	select {
	case a.Bans.Wake <- struct{}{}:
	default:
	}
	rev := a.Bans.Revision()
	// Nothing the purges match is served from here on: the applied
	// revision goes to the control plane now, and answers for them all
	// (it names no purge). What a purge of a URL or key removed at once
	// goes ahead of it, so that the status that completes the purge counts
	// it, where it would say none; a count the sweep raised follows.
	sent := make([]int64, len(added))
	for i, b := range added {
		if sent[i] = b.Removed().Load(); sent[i] > 0 {
			report(&pb.PurgeResult{NodeId: a.NodeID, PurgeId: b.Purge().GetId(), RevisionApplied: rev, ObjectsRemoved: sent[i]})
		}
	}
	report(&pb.PurgeResult{NodeId: a.NodeID, RevisionApplied: rev})
	for i, b := range added {
		a.Metrics.Purges.WithLabelValues(strings.ToLower(strings.TrimPrefix(b.Purge().GetKind().String(), "PURGE_KIND_"))).Inc()
		if b.Soft() {
			continue // it removes nothing: the applied revision said it all
		}
		a.Tasks.Go("purge-report", func() {
			t := time.NewTimer(purgeAckWithin)
			defer t.Stop()
			count := func(sweeping bool) *pb.PurgeResult {
				return &pb.PurgeResult{NodeId: a.NodeID, PurgeId: b.Purge().GetId(), RevisionApplied: rev,
					ObjectsRemoved: b.Removed().Load(), Sweeping: sweeping}
			}
			late := false
			for {
				select {
				case <-b.Swept():
					// Once a sweeping result went, the whole count must
					// follow; else only one that says more than was sent.
					if r := count(false); late || r.GetObjectsRemoved() != sent[i] || sent[i] == 0 {
						report(r)
					}
					return
				case <-t.C: // the count so far; the whole one when the sweep ends
					late = true
					report(count(true))
				case <-a.Tasks.Context().Done():
					return // the node stops: no session is left to carry it
				}
			}
		})
	}
}

// purgeNow removes at once what a hard ban names exactly, and the hot
// copies any ban may cover: a soft one too, as the sweep walks the store
// and never a copy, which would be served as fresh until it expired.
func (a *Applier) purgeNow(b *Ban) {
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
		p := a.Policies.Load().Match(b.URL()[:i], r.URL.Path)
		k := p.URLKeys(r)
		keys = k[:]
	default:
		a.Target.DropCopies(nil)
		return
	}
	if !b.Soft() {
		idx := a.Target.Index()
		for _, k := range keys {
			if idx.Delete(k) {
				b.Removed().Add(1)
			}
		}
	}
	a.Target.DropCopies(keys)
}

// Swept is told of the bans a sweep applied: it keeps the state and
// logs the sweep.
func (a *Applier) Swept(applied []*Ban) {
	a.Metrics.Bans.Set(float64(len(a.Bans.Pending())))
	if a.file != "" {
		if err := a.Bans.Save(a.file); err != nil {
			a.Logger.Error("saving purge state", "err", err)
		}
	}
	var removed int64
	for _, b := range applied {
		removed += b.Removed().Load()
	}
	a.Logger.Info("purges swept", "purges", len(applied), "objects_removed", removed, "revision", a.Bans.Revision())
}

// Restore loads the purge state kept in dir, and keeps it there from
// now on.
func (a *Applier) Restore(dir string) error {
	a.file = filepath.Join(dir, StateFile)
	if err := a.Bans.Load(a.file); err != nil {
		return err
	}
	if len(a.Bans.Pending()) > 0 {
		a.Bans.Wake <- struct{}{}
	}
	return nil
}
