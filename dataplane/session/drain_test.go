package session

import (
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A drain the node asks for itself is out once an epoch without the node
// comes, and undrained when a later epoch has it again; epochs before the
// request, or that still have it, change nothing.
func TestSelfDrainFollowsTheEpochs(t *testing.T) {
	with := &pb.RingEpoch{Epoch: 1, Members: []*pb.Member{{Id: "a"}, {Id: "b"}}}
	without := &pb.RingEpoch{Epoch: 2, Members: []*pb.Member{{Id: "b"}}}
	var d selfDrain
	if d.epoch(without, "a") || d.epoch(with, "a") {
		t.Fatal("undrained without a drain asked for")
	}
	out := d.request()
	if d.request() != out {
		t.Fatal("a second request made a second drain")
	}
	if d.epoch(with, "a") {
		t.Fatal("undrained by an epoch that still had the node")
	}
	select {
	case <-out:
		t.Fatal("out of the ring while the epoch has the node")
	default:
	}
	if d.epoch(without, "a") {
		t.Fatal("undrained by the epoch without the node")
	}
	select {
	case <-out:
	default:
		t.Fatal("not out after an epoch without the node")
	}
	if !d.epoch(with, "a") {
		t.Fatal("an epoch with the node again did not undrain it")
	}
	if d.request() == out {
		t.Fatal("a drain after the undrain reused the old one")
	}
}
