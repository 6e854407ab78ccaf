package admin

import (
	"context"
	"fmt"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// DrainProgress is where a drain stands, as WaitDrained sees it.
type DrainProgress struct {
	// Epoch is the current ring epoch; InRing whether the node is still in it.
	Epoch  uint64
	InRing bool
	// Applied and Nodes count the other nodes with a session, and those of
	// them that serve with Epoch or later (so route around the node).
	Applied, Nodes int
	// HandoffAnswers is how many handoff requests the node has answered
	// (its keys taken by their new owners); Quiet how long that count has
	// not moved, by its load reports. Connected is false once the node has
	// no session (it stopped).
	HandoffAnswers uint64
	Quiet          time.Duration
	Connected      bool
	// Done: the node owns nothing, every node routes around it, and its
	// peers have stopped taking keys from it for the quiet period asked.
	Done bool
}

func (p DrainProgress) String() string {
	ring := "still in the ring"
	if !p.InRing {
		ring = "out of the ring"
	}
	s := fmt.Sprintf("epoch %d: %s; applied by %d of %d nodes; %d keys handed off", p.Epoch, ring, p.Applied, p.Nodes, p.HandoffAnswers)
	if !p.Connected {
		return s + " (node disconnected)"
	}
	return s + fmt.Sprintf(", none for %s", p.Quiet.Round(time.Second))
}

// WaitDrained waits, after DrainNode, until node id owns no keys, every
// other node serves an epoch without it, and its peers have taken no key
// from it by handoff for quiet (measured on its load reports, sent every
// few seconds). It calls progress (when not nil) each time the figures
// change, and returns when done or when ctx ends.
func (c *Client) WaitDrained(ctx context.Context, id string, quiet time.Duration, progress func(DrainProgress)) error {
	var last DrainProgress
	var answers uint64
	var since time.Time // report time at which answers was first seen
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s to drain: %w (last: %s)", id, ctx.Err(), last)
			case <-tick.C:
			}
		}
		list, err := c.ListNodes(ctx)
		if err != nil {
			return err
		}
		p := DrainProgress{Epoch: list.GetEpoch()}
		var self *pb.Node
		for _, n := range list.GetNodes() {
			if n.GetMember().GetId() == id {
				self = n
				continue
			}
			if n.GetSessionReplica() == "" {
				continue
			}
			p.Nodes++
			if n.GetServingEpoch() >= list.GetEpoch() {
				p.Applied++
			}
		}
		if self == nil {
			return fmt.Errorf("%w: %q is not registered", ErrNotFound, id)
		}
		if self.GetMember().GetState() != pb.MemberState_MEMBER_STATE_DRAINING {
			return fmt.Errorf("%s is not draining (state %s): drain it first", id, self.GetMember().GetState())
		}
		p.InRing = self.GetInRing()
		p.Connected = self.GetSessionReplica() != ""
		reported := self.GetLastReportAt().AsTime()
		if got := self.GetLoad().GetHandoffAnswersTotal(); got != answers || since.IsZero() {
			answers, since = got, reported
		}
		p.HandoffAnswers = answers
		p.Quiet = reported.Sub(since)
		p.Done = !p.InRing && p.Applied == p.Nodes && (!p.Connected || p.Quiet >= quiet)
		if progress != nil && (p != last || first) {
			progress(p)
		}
		last = p
		if p.Done {
			return nil
		}
	}
}
