package session

import (
	"slices"
	"sync/atomic"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// maxQueuedResults bounds the purge results waiting for a session; past it
// the oldest go (the applied revision in the next one answers for them).
const maxQueuedResults = 10000

// plain reports whether r says no more than "applied up to its revision".
func plain(r *pb.PurgeResult) bool {
	return r.GetObjectsRemoved() == 0 && r.GetError() == "" && !r.GetSweeping()
}

// report queues a purge result for the control plane. The applied revision
// answers for every purge before it: a plain result replaces the plain
// results still queued, so a burst of purges costs one message.
func (c *Client) report(r *pb.PurgeResult) {
	c.resultsMu.Lock()
	if plain(r) {
		c.results = slices.DeleteFunc(c.results, func(q *pb.PurgeResult) bool {
			if plain(q) && q.GetRevisionApplied() > r.GetRevisionApplied() {
				r = q
			}
			return plain(q)
		})
	}
	if len(c.results) >= maxQueuedResults {
		c.results = c.results[1:]
	}
	c.results = append(c.results, r)
	c.resultsMu.Unlock()
	select {
	case c.resultReq <- struct{}{}:
	default:
	}
}

// maxCatchUpErrors bounds the errors reported for missed purges in one
// session; the node logs every one.
const maxCatchUpErrors = 100

// catchUpReport reports, of the results of missed purges ps, the last
// one's, which moves the node's purge revision past all of them, and
// errors up to maxCatchUpErrors: a result for each would cost the control
// plane two etcd writes per retained purge when a new node joins.
func (c *Client) catchUpReport(ps []*pb.Purge, errs *atomic.Int32) func(*pb.PurgeResult) {
	if len(ps) == 0 {
		return c.report
	}
	last := ps[len(ps)-1].GetId()
	return func(r *pb.PurgeResult) {
		// A result naming no purge is the applied revision alone.
		if r.GetPurgeId() == last || r.GetPurgeId() == "" || r.GetError() != "" && errs.Add(1) <= maxCatchUpErrors {
			c.report(r)
		}
	}
}

// sendResults sends the queued purge results; those not sent stay queued.
func (c *Client) sendResults(stream stream) error {
	c.resultsMu.Lock()
	defer c.resultsMu.Unlock()
	for len(c.results) > 0 {
		if err := stream.send(&pb.SessionRequest{Msg: &pb.SessionRequest_PurgeResult{PurgeResult: c.results[0]}}); err != nil {
			return err
		}
		c.results = c.results[1:]
	}
	return nil
}
