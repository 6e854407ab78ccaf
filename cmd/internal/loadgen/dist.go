package loadgen

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/shardcache/shardcache/cmd/internal/units"
)

// Keys draws key numbers in [0, N).
type Keys interface {
	// Next returns the next key; r is the caller's own random source.
	Next(r *rand.Rand) int
}

// ParseKeys reads a key distribution: "uniform", "sequential" or
// "zipf:S" (S > 0, e.g. zipf:1.0), over n keys.
func ParseKeys(spec string, n int) (Keys, error) {
	if n < 1 {
		return nil, fmt.Errorf("key count %d: want at least 1", n)
	}
	switch {
	case spec == "uniform":
		return Uniform(n), nil
	case spec == "sequential":
		return &Sequential{n: n}, nil
	case strings.HasPrefix(spec, "zipf:"):
		s, err := strconv.ParseFloat(strings.TrimPrefix(spec, "zipf:"), 64)
		if err != nil || s <= 0 || math.IsInf(s, 0) {
			return nil, fmt.Errorf("key distribution %q: want zipf:S with S > 0", spec)
		}
		return NewZipf(s, n), nil
	}
	return nil, fmt.Errorf("key distribution %q: want uniform, sequential or zipf:S", spec)
}

// Uniform draws every key with the same probability.
type Uniform int

// Next draws a key.
func (u Uniform) Next(r *rand.Rand) int { return r.IntN(int(u)) }

// Sequential cycles through the keys in order, shared by all workers.
type Sequential struct {
	n    int
	next atomic.Int64
}

// Next returns the following key.
func (s *Sequential) Next(*rand.Rand) int { return int((s.next.Add(1) - 1) % int64(s.n)) }

// Zipf draws key k (rank k+1) with probability proportional to 1/(k+1)^s.
// Unlike math/rand's, it accepts s <= 1, the skew web caches are measured at.
type Zipf struct {
	cdf []float64
}

// NewZipf precomputes the distribution over n keys.
func NewZipf(s float64, n int) *Zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return &Zipf{cdf: cdf}
}

// Next draws a key by inverting the cumulative distribution.
func (z *Zipf) Next(r *rand.Rand) int {
	u := r.Float64()
	return min(sort.SearchFloat64s(z.cdf, u), len(z.cdf)-1)
}

// Sizes gives each key its object size; a key always has the same size, so
// it names one object.
type Sizes interface {
	Size(key int) int64
}

// ParseSizes reads "4KiB" (fixed) or "1KiB-64KiB" (uniform in the range,
// chosen per key by its hash).
func ParseSizes(spec string) (Sizes, error) {
	lo, hi, isRange := strings.Cut(spec, "-")
	a, err := units.ParseBytes(lo)
	if err != nil {
		return nil, fmt.Errorf("object size %q: %w", spec, err)
	}
	if !isRange {
		return Fixed(a), nil
	}
	b, err := units.ParseBytes(hi)
	if err != nil {
		return nil, fmt.Errorf("object size %q: %w", spec, err)
	}
	if b < a {
		return nil, fmt.Errorf("object size %q: the upper bound is below the lower", spec)
	}
	return Range{Min: a, Max: b}, nil
}

// Fixed gives every object the same size.
type Fixed int64

// Size is the fixed size.
func (f Fixed) Size(int) int64 { return int64(f) }

// Range gives each key a size in [Min, Max], fixed by the key's hash.
type Range struct{ Min, Max int64 }

// Size is the key's size.
func (r Range) Size(key int) int64 {
	h := fnv.New64a()
	h.Write([]byte(strconv.Itoa(key)))
	return r.Min + int64(h.Sum64()%uint64(r.Max-r.Min+1))
}
