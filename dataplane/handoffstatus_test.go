package dataplane

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// A key handed off to a new owner after a ring change: what the previous
// owner added to its answer (its Cache-Status member) is not the object's,
// and does not be stored and served with every later hit at the new owner.
func TestHandoffDoesNotStorePreviousOwnersCacheStatus(t *testing.T) {
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	fc, a, b := startPairOn(t, origin.URL, noHotKeys)
	c := startNode(t, "c", fc.addr, origin.URL, noHotKeys)
	e2 := epochOf(2, a, b, c)
	path := ""
	r1, r2 := mustRing(t, epochOf(1, a, b)), mustRing(t, e2)
	for i := range 10000 {
		p := "/ho/" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if r1.Owner("http127.0.0.1"+p).ID == "a" && r2.Owner("http127.0.0.1"+p).ID == "c" {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no key moving from a to c")
	}
	do(t, "GET", "http://"+a.ClientAddr().String()+path)
	fc.publish(e2)
	for _, n := range []*Node{a, b, c} {
		waitEpoch(t, n, 2)
	}
	do(t, "GET", "http://"+c.ClientAddr().String()+path) // handed off from a
	resp, _ := do(t, "GET", "http://"+c.ClientAddr().String()+path)
	t.Logf("c's hit: X-Cache %s node %s Cache-Status %q; origin saw %d", resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"), resp.Header.Values("Cache-Status"), o.count(path))
	for _, v := range resp.Header.Values("Cache-Status") {
		for _, m := range strings.Split(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(m), "a;") {
				t.Fatalf("c's hit carries the previous owner a's Cache-Status member %q, stored as the object's", m)
			}
		}
	}
}
