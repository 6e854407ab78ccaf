package store

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkSteadyHitRatio drives one node's store with the bench's S2s
// workload (Zipf s=1.0 over 20,000 keys of 16 KiB, of which the node owns
// a third; a fifth of the key space cached over three nodes; the memory
// budget less the hot copies' eighth) and reports its hit ratio after the
// warm-up beside the ideal bound for the objects it holds (disk and
// probation, sampled): the popularity share of as many of its most popular
// keys, less their first-time requests in the measured window. held-share
// is the popularity share of the keys held at the end; disk-writes counts
// the objects the disk tier admitted. lfu-hit-ratio is what an exact LFU of
// as many objects gets from the same requests (exactLFU): the bound assumes
// the most popular keys are known in advance, which no cache that learns
// them from requests can match, so lfu-hit-ratio is the reachable figure
// beside it.
func BenchmarkSteadyHitRatio(b *testing.B) {
	const (
		keys, nodes = 20000, 3
		size        = 16 << 10
		warm, meas  = 200000 / nodes, 100000 / nodes
		budget      = keys * size / 5 / nodes
	)
	var h float64
	for k := 1; k <= keys; k++ {
		h += 1 / float64(k)
	}
	own := func(k uint64) bool { return keyHash(fmt.Sprintf("k%d", k))%nodes == 0 }
	var p []float64 // the node's keys' popularity, most popular first
	var share float64
	for k := uint64(0); k < keys; k++ {
		if own(k) {
			p = append(p, 1/float64(k+1)/h)
			share += 1 / float64(k+1) / h
		}
	}
	data := body("k", 1, size)
	for b.Loop() {
		s := openStore(b, b.TempDir(), func(c *Config) {
			c.DiskBytes, c.MemoryBytes, c.MemoryMaxObject = budget, budget-budget/8, 1<<20
		})
		z := rand.NewZipf(rand.New(rand.NewPCG(41, 42)), 1.0000001, 1, keys-1)
		var hits, n int
		var held []float64
		var stream []uint64 // the node's requests, for exactLFU
		for n < warm+meas {
			k := z.Uint64()
			if !own(k) {
				continue
			}
			n++
			stream = append(stream, k)
			key := fmt.Sprintf("k%d", k)
			if _, ok := s.Get(key); ok {
				if n > warm {
					hits++
				}
			} else {
				offer(b, s, meta(key), data, false)
			}
			if n > warm && n%1000 == 0 {
				st := s.Stats()
				held = append(held, float64(st.DiskObjects+st.ProbationObjects))
			}
		}
		objects := 0.0
		for _, v := range held {
			objects += v / float64(len(held))
		}
		var top, first float64
		for _, v := range p[:min(int(objects), len(p))] {
			q := v / share
			top += q
			first += math.Pow(1-q, warm) * (1 - math.Pow(1-q, meas))
		}
		var heldShare float64
		s.Keys(func(key string) bool {
			var k int
			fmt.Sscanf(key, "k%d", &k)
			heldShare += 1 / float64(k+1) / h / share
			return true
		})
		st := s.Stats()
		s.Close()
		b.ReportMetric(float64(hits)/meas, "hit-ratio")
		b.ReportMetric(exactLFU(stream, int(objects), warm), "lfu-hit-ratio")
		b.ReportMetric(top-first/meas, "bound")
		b.ReportMetric(heldShare, "held-share")
		b.ReportMetric(objects, "objects")
		b.ReportMetric(float64(st.ProbationObjects), "probation")
		b.ReportMetric(float64(st.Admitted["disk"]), "disk-writes")
		b.ReportMetric(float64(st.Rewritten), "rewritten")
	}
}

// exactLFU is the hit ratio, over the requests after the first warm, of a
// cache of capacity objects that counts every request of every key exactly
// (since the start, never forgetting) and holds the most requested: a key
// not held replaces the least requested held one once it has been requested
// more often. Under a fixed popularity that is the best a cache learning
// from requests does, up to the noise of the counts.
func exactLFU(stream []uint64, capacity, warm int) float64 {
	count := map[uint64]int{}
	held := map[uint64]*lfuItem{}
	h := &lfuHeap{}
	hits := 0
	for i, k := range stream {
		count[k]++
		if it, ok := held[k]; ok {
			if i >= warm {
				hits++
			}
			it.count = count[k]
			heap.Fix(h, it.idx)
			continue
		}
		if h.Len() >= capacity {
			if capacity == 0 || (*h)[0].count >= count[k] {
				continue
			}
			delete(held, heap.Pop(h).(*lfuItem).key)
		}
		it := &lfuItem{key: k, count: count[k]}
		heap.Push(h, it)
		held[k] = it
	}
	return float64(hits) / float64(max(1, len(stream)-warm))
}

// lfuItem is a key exactLFU holds: its count and its place in the heap.
type lfuItem struct {
	key        uint64
	count, idx int
}

// lfuHeap is exactLFU's held keys, least requested first.
type lfuHeap []*lfuItem

func (h lfuHeap) Len() int           { return len(h) }
func (h lfuHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h lfuHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *lfuHeap) Push(x any) {
	it := x.(*lfuItem)
	it.idx = len(*h)
	*h = append(*h, it)
}
func (h *lfuHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// TestExactLFU pins the reference policy: a key replaces the least
// requested held one only once requested more often, and hits count from
// the end of the warm-up.
func TestExactLFU(t *testing.T) {
	const a, b = 1, 2
	stream := []uint64{a, a, b, b, b, b, a}
	// Capacity 1: a is held (hit at 1); b replaces it at its third request
	// (index 4) and hits at 5; a, asked for again, has fewer requests.
	if got, want := exactLFU(stream, 1, 0), 2.0/7; got != want {
		t.Errorf("capacity 1: hit ratio %v, want %v", got, want)
	}
	if got, want := exactLFU(stream, 1, 4), 1.0/3; got != want {
		t.Errorf("capacity 1 after 4 warm: hit ratio %v, want %v", got, want)
	}
	if got, want := exactLFU(stream, 2, 0), 5.0/7; got != want {
		t.Errorf("capacity 2: hit ratio %v, want %v", got, want)
	}
	if got := exactLFU(stream, 0, 0); got != 0 {
		t.Errorf("capacity 0: hit ratio %v, want 0", got)
	}
}
