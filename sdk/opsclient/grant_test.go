package opsclient

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWarmGrantIsForOneNodeAndShortLived: a grant checks for the node and
// admin token it was made with, until it expires; another node, another
// token, a changed expiry or signature, an expired grant, one expiring
// too far ahead and a token that is no grant are refused.
func TestWarmGrantIsForOneNodeAndShortLived(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := WarmGrant("admin", "node-1", now.Add(time.Minute))
	if !IsWarmGrant(g) || IsWarmGrant("admin") {
		t.Fatalf("IsWarmGrant: %t for a grant, %t for a token", IsWarmGrant(g), IsWarmGrant("admin"))
	}
	if err := CheckWarmGrant("admin", "node-1", g, now); err != nil {
		t.Fatalf("a fresh grant for its node: %v", err)
	}
	forged := strings.Replace(g, ".1800000060.", ".1800000300.", 1)
	for name, c := range map[string]struct {
		token, node, grant string
		at                 time.Time
		want               string
	}{
		"another node":       {"admin", "node-2", g, now, `for node "node-1"`},
		"another token":      {"other", "node-1", g, now, "signature"},
		"a later expiry":     {"admin", "node-1", forged, now, "signature"},
		"expired":            {"admin", "node-1", g, now.Add(time.Minute), "expired"},
		"too long":           {"admin", "node-1", WarmGrant("admin", "node-1", now.Add(MaxGrantLife+time.Second)), now, "ahead"},
		"no grant":           {"admin", "node-1", "admin", now, "not one"},
		"no admin token":     {"", "node-1", g, now, "not one"},
		"a node id with a .": {"admin", "node.1", WarmGrant("admin", "node.1", now.Add(time.Minute)), now, ""},
	} {
		err := CheckWarmGrant(c.token, c.node, c.grant, c.at)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want != "" && (!errors.Is(err, ErrGrant) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want ErrGrant saying %q", name, err, c.want)
		}
	}
}
