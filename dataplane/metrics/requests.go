package metrics

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxRequestSeries bounds the counters CountRequest keeps resolved; a
// series past it is still counted, through the vector's label lookup.
const MaxRequestSeries = 1024

// requestSeries is one series of shardcache_requests_total.
type requestSeries struct{ route, cache, method, code string }

// requestCounters are the counters of shardcache_requests_total resolved
// so far, by series.
type requestCounters struct {
	m sync.Map // requestSeries → prometheus.Counter
	n atomic.Int32
}

// CountRequest counts a client request in shardcache_requests_total. Each
// series' counter is resolved once and kept (its label values are few:
// routes, cache statuses, methods, status classes), so that a request
// costs one map read, not the vector's hashing of four labels.
func (m *Set) CountRequest(route, cache, method, code string) {
	k := requestSeries{route, cache, method, code}
	if c, ok := m.requests.m.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.Requests.WithLabelValues(route, cache, method, code)
	if m.requests.n.Load() < MaxRequestSeries {
		if _, loaded := m.requests.m.LoadOrStore(k, c); !loaded {
			m.requests.n.Add(1)
		}
	}
	c.Inc()
}
