package metrics

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkShadowObserve is the per-request cost of the local-only estimate.
func BenchmarkShadowObserve(b *testing.B) {
	s := NewShadow(1<<30, MaxTracked)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("httpwww.example.com/obj/%d", i)
	}
	i, now := 0, time.Now()
	for b.Loop() {
		s.Observe(keys[i&(len(keys)-1)], 4096, time.Hour, true, now)
		i++
	}
}
