package store

import (
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
// the objects the disk tier admitted.
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
		for n < warm+meas {
			k := z.Uint64()
			if !own(k) {
				continue
			}
			n++
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
		b.ReportMetric(top-first/meas, "bound")
		b.ReportMetric(heldShare, "held-share")
		b.ReportMetric(objects, "objects")
		b.ReportMetric(float64(st.ProbationObjects), "probation")
		b.ReportMetric(float64(st.Admitted["disk"]), "disk-writes")
		b.ReportMetric(float64(st.Rewritten), "rewritten")
	}
}
