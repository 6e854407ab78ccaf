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

// TestGrantKindsDoNotPassForEachOther: a read grant is checked with the
// token it was signed with (the admin or the ops token) and is never taken
// for a warm grant, nor a warm grant for a read grant.
func TestGrantKindsDoNotPassForEachOther(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	read := ReadGrant("ops", "node-1", now.Add(time.Minute))
	warm := WarmGrant("ops", "node-1", now.Add(time.Minute))
	if !IsReadGrant(read) || IsWarmGrant(read) || IsReadGrant(warm) {
		t.Fatalf("IsReadGrant/IsWarmGrant mix up the kinds: %q, %q", read, warm)
	}
	if err := CheckReadGrant("ops", "node-1", read, now); err != nil {
		t.Fatalf("a read grant signed with the ops token: %v", err)
	}
	if err := CheckReadGrant("admin", "node-1", read, now); !errors.Is(err, ErrGrant) {
		t.Errorf("a read grant signed with the ops token checked with the admin token: %v, want ErrGrant", err)
	}
	if err := CheckWarmGrant("ops", "node-1", read, now); !errors.Is(err, ErrGrant) {
		t.Errorf("a read grant taken for a warm grant: %v", err)
	}
	// The same node and expiry under the other kind's prefix: the kind is signed.
	relabeled := strings.Replace(warm, "warm-grant.", "read-grant.", 1)
	if err := CheckReadGrant("ops", "node-1", relabeled, now); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("a warm grant relabelled as a read grant: %v, want a signature mismatch", err)
	}
}
