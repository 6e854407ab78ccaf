// Package loadgen is the load generator behind `cachectl bench`: HTTP/1.1
// keep-alive clients spread over several targets, keys drawn from a uniform,
// Zipf or sequential distribution, and latencies recorded in a log-linear
// histogram so that percentiles are measured, not averaged.
package loadgen

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: 2^subBits buckets per power of
// two, so a recorded value is off by less than 1/2^subBits (under 1 %).
const subBits = 7

// Histogram counts durations in log-linear buckets (as HdrHistogram does):
// exact below 2^subBits ns, then 2^subBits buckets per power of two. It is
// not safe for concurrent use; each worker keeps its own and they are merged.
type Histogram struct {
	counts [64 << subBits]uint64
	n      uint64
	max    time.Duration
	min    time.Duration
}

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits // >= 1
	return e<<subBits | int(v>>(e-1)&(1<<subBits-1))
}

// bucketTop is the largest value that falls in bucket i.
func bucketTop(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	e := i >> subBits
	sub := uint64(i & (1<<subBits - 1))
	lo := (1<<subBits | sub) << (e - 1)
	return lo + 1<<(e-1) - 1
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.n++
	h.max = max(h.max, d)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of recorded durations.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded duration, exactly.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the smallest bucket bound below which a fraction q of the
// recorded durations fall (q in [0,1]), capped at Max.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = max(min(rank, h.n), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketTop(i)), h.max)
		}
	}
	return h.max
}
