package dataplane

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A restart after the whole cluster stopped starts from an epoch with no
// members: the node waits for the next one, and logs no error.
func TestAnEmptyEpochIsNoError(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	var logs syncBuffer
	fc, n := startOne(t, origin.URL, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	fc.publish(&pb.RingEpoch{Epoch: 2, PreviousEpoch: 1})
	waitFor(t, "the empty epoch to reach the node", func() bool {
		return strings.Contains(logs.String(), "no members") || strings.Contains(logs.String(), "level=ERROR")
	})
	e := epochOf(3, n)
	e.PreviousEpoch = 2
	fc.publish(e)
	waitEpoch(t, n, 3)
	if strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "no members") {
		t.Fatalf("logs:\n%s\nwant no error, and the empty epoch noted", logs.String())
	}
}
