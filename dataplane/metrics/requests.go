package metrics

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// requestLabels are the labels of shardcache_requests_total.
type requestLabels struct{ route, cache, method, class string }

// requestCounters keeps the client request counters by their labels, each
// looked up by label once: a request reads a map that is replaced, never
// changed, so counting takes no lock and validates no label. It holds at
// most maxRequestCounters; past that a request's counter is looked up by
// label, as it would be without the cache.
type requestCounters struct {
	mu sync.Mutex // serialises the copies
	m  atomic.Pointer[map[requestLabels]prometheus.Counter]
}

// maxRequestCounters bounds the cached counters: routes × cache statuses
// × methods × status classes seen, a few hundred at most in practice.
const maxRequestCounters = 1024

// CountRequest counts one client request by route, cache status, method
// label and status class.
func (m *Set) CountRequest(route, cache, method, class string) {
	m.requestCounter(requestLabels{route, cache, method, class}).Inc()
}

func (m *Set) requestCounter(l requestLabels) prometheus.Counter {
	c := &m.requestCounters
	if p := c.m.Load(); p != nil {
		if ctr, ok := (*p)[l]; ok {
			return ctr
		}
	}
	ctr := m.Requests.WithLabelValues(l.route, l.cache, l.method, l.class)
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[requestLabels]prometheus.Counter
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if len(old) >= maxRequestCounters {
		return ctr
	}
	next := maps.Clone(old)
	if next == nil {
		next = map[requestLabels]prometheus.Counter{}
	}
	next[l] = ctr
	c.m.Store(&next)
	return ctr
}
