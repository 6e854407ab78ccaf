package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestFourthNodeTakesItsKeysByHandoff warms 10,000 keys on three nodes,
// adds a fourth, and reads every key again: with handoff the keys that
// moved come from their previous owners, without it from the origin.
func TestFourthNodeTakesItsKeysByHandoff(t *testing.T) {
	const keys = 10000
	paths := make([]string, keys)
	for i := range paths {
		paths[i] = fmt.Sprintf("/obj/h%d?size=512", i)
	}
	caused := map[bool]int{}
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff %v", handoff), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cfg := clusterConfig{nodes: 3, origin: &countingOrigin{counts: map[string]int{}}}
			cfg.nodeArgs = func(int) []string {
				args := []string{"--hot-threshold", "-1"}
				if !handoff {
					args = append(args, "--handoff-window", "-1s")
				}
				return args
			}
			c := startClusterWith(t, ctx, cfg)
			origin := cfg.origin.(*countingOrigin)
			fetchAll(t, c, paths, 0)
			warm := origin.total.Load()
			if warm != keys {
				t.Fatalf("warming made %d origin requests, want %d", warm, keys)
			}
			c.addNode()
			for _, nd := range c.nodes {
				c.waitMembers(ctx, nd, 4)
			}
			var r ringJSON
			if err := c.cachectl(ctx, &r, "ring"); err != nil {
				t.Fatal(err)
			}
			rg := r.ring(t)
			moved := 0
			for _, p := range paths {
				if rg.Owner("http127.0.0.1"+p).ID == "node-4" {
					moved++
				}
			}
			fetchAll(t, c, paths, 1)
			caused[handoff] = int(origin.total.Load() - warm)
			t.Logf("handoff %v: %d of %d keys moved to node-4; %d origin requests after it joined", handoff, moved, keys, caused[handoff])
			if moved < keys/8 {
				t.Fatalf("only %d keys moved", moved)
			}
			if handoff && caused[true] > moved/100 {
				t.Errorf("with handoff: %d origin requests for %d moved keys, want near none", caused[true], moved)
			}
			if !handoff && caused[false] < moved*9/10 {
				t.Errorf("without handoff: %d origin requests for %d moved keys", caused[false], moved)
			}
		})
	}
}
