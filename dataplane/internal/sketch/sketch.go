// Package sketch estimates how often each cache key is requested, in
// bounded memory: the one frequency sketch of the data plane, with which
// the owner tells hot keys (worth a second owner and local copies) from the
// long tail, and the disk tier admits what is asked for again. It is a count-min sketch whose counters are
// halved every period, as TinyLFU does, so the estimate follows the recent
// rate: at a steady r requests per period, a key's estimate settles near
// 2r, and a key that stops being requested fades within a few periods.
package sketch

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

const depth = 4

// Sketch counts key observations. It is safe for concurrent use and never
// allocates after New.
type Sketch struct {
	seed   maphash.Seed
	mask   uint64
	rows   [depth][]atomic.Uint32
	period time.Duration
	now    func() time.Time
	// nextDecay is when counters are next halved, in UnixNano.
	nextDecay atomic.Int64
	// owned: the counters are halved by the owner's Halve, never inside
	// Observe.
	owned atomic.Bool
}

// New returns a sketch with width counters per row (rounded up to a power
// of two; 4 rows of 4 bytes each), halved every period. now is the clock;
// nil means time.Now.
func New(width int, period time.Duration, now func() time.Time) *Sketch {
	w := 1
	for w < width {
		w <<= 1
	}
	if now == nil {
		now = time.Now
	}
	s := &Sketch{seed: maphash.MakeSeed(), mask: uint64(w - 1), period: period, now: now}
	for i := range s.rows {
		s.rows[i] = make([]atomic.Uint32, w)
	}
	s.nextDecay.Store(now().Add(period).UnixNano())
	return s
}

// Observe counts one request for key and returns its estimated count.
func (s *Sketch) Observe(key string) uint32 { return s.ObserveHash(maphash.String(s.seed, key)) }

// ObserveHash is Observe for a key the caller has hashed itself (a
// well-mixed 64-bit hash): it counts the same as Observe of another key.
func (s *Sketch) ObserveHash(h uint64) uint32 {
	if !s.owned.Load() {
		s.maybeDecay()
	}
	h1, h2 := h, h>>32|h<<32
	est := ^uint32(0)
	for i := range s.rows {
		c := &s.rows[i][(h1+uint64(i)*h2)&s.mask]
		v := c.Load()
		if v < 1<<31 { // saturate instead of wrapping
			v = c.Add(1)
		}
		est = min(est, v)
	}
	return est
}

// Rate is the rate per minute that an estimated count (Observe's) stands
// for. A steady rate r per period keeps the count between r and 2r; the
// count is read as 1.5r, so the estimate is within a third of the true rate.
func (s *Sketch) Rate(count uint32) float64 {
	return float64(count) * float64(time.Minute) / (1.5 * float64(s.period))
}

// Estimate returns key's estimated count without counting a request.
func (s *Sketch) Estimate(key string) uint32 { return s.EstimateHash(maphash.String(s.seed, key)) }

// EstimateHash is Estimate for a key hashed as for ObserveHash.
func (s *Sketch) EstimateHash(h uint64) uint32 {
	h1, h2 := h, h>>32|h<<32
	est := ^uint32(0)
	for i := range s.rows {
		est = min(est, s.rows[i][(h1+uint64(i)*h2)&s.mask].Load())
	}
	return est
}

// Owned says the counters are halved by the caller's own loop, calling
// Halve every period, so that no request pays for the halving (4 rows of
// counters) inside Observe.
func (s *Sketch) Owned() { s.owned.Store(true) }

// Period is how often the counters are halved.
func (s *Sketch) Period() time.Duration { return s.period }

// maybeDecay halves every counter once per period. The caller that wins the
// swap of the deadline does the halving; the others go on counting.
func (s *Sketch) maybeDecay() {
	next := s.nextDecay.Load()
	now := s.now().UnixNano()
	if now < next || !s.nextDecay.CompareAndSwap(next, now+int64(s.period)) {
		return
	}
	s.Halve()
}

// Halve halves every counter.
func (s *Sketch) Halve() {
	for i := range s.rows {
		for j := range s.rows[i] {
			c := &s.rows[i][j]
			for {
				v := c.Load()
				if v == 0 || c.CompareAndSwap(v, v/2) {
					break
				}
			}
		}
	}
}
