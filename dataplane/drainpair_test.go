package dataplane

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A node drained out of a ring of two still waits, as it stops, for its
// one peer to take its keys by handoff: after /drain the ring it holds is
// its peer alone, which is a peer all the same.
func TestADrainedNodeOfARingOfTwoServesHandoffBeforeStopping(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	fc := startFakeControl(t, "127.0.0.1:0")
	a := startNode(t, "a", fc.addr, origin.URL)
	var logs syncBuffer
	b := startNode(t, "b", fc.addr, origin.URL, func(c *Config) {
		c.DrainGrace = 5 * time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	fc.publish(epochOf(1, a, b))
	waitEpoch(t, a, 1)
	waitEpoch(t, b, 1)
	fc.publish(epochOf(2, a)) // b drained out
	waitEpoch(t, b, 2)
	b.drain()
	if !strings.Contains(logs.String(), "draining: serving handoff requests") || !strings.Contains(logs.String(), "msg=drained") {
		t.Fatalf("b stopped at once, out of a ring holding its peer a; its log:\n%s", logs.String())
	}
}
