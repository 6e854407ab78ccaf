package store

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// The stripes' first fills, all at once as when a node starts serving:
// each stripe takes a segment of its own. (Taking one and opening it were
// two steps under the pool's lock, and two stripes could open the same
// free segment, each under its own seq: the first one's records then read
// as another seq's and were discarded, a refetch for every one of them.)
func TestStripesStartingTogetherNeverShareASegment(t *testing.T) {
	for round := range 20 {
		s := openStore(t, t.TempDir(), func(c *Config) { c.MemoryMaxObject, c.ProbationBytes = 1, -1 })
		var wg sync.WaitGroup
		keys := make([]string, 32)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%d-k%d", round, i)
			wg.Go(func() { put(t, s, meta(keys[i]), body(keys[i], round, 700), false) })
		}
		wg.Wait()
		for _, k := range keys {
			b, _, ok := read(t, s, k)
			if !ok || !bytes.Equal(b, body(k, round, 700)) {
				t.Fatalf("round %d: %s read back %v (%d bytes) after concurrent first fills", round, k, ok, len(b))
			}
		}
		for reason, n := range s.Stats().Discarded {
			if n > 0 {
				t.Fatalf("round %d: %d records discarded (%s)", round, n, reason)
			}
		}
		owner := map[int]int{}
		for _, st := range s.disk.stripes {
			if st.cur == nil {
				continue
			}
			if other, ok := owner[st.cur.idx]; ok {
				t.Fatalf("round %d: stripes %d and %d write to segment %d", round, other, st.id, st.cur.idx)
			}
			owner[st.cur.idx] = st.id
		}
		s.Close()
	}
}
