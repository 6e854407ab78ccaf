// Package logstream hands access-log records to the operators streaming
// them (cachectl log), without ever slowing a request: a record goes to a
// stream only when the stream keeps up, within its rate; otherwise it is
// dropped and counted.
package logstream

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/sdk/admin"
)

// Record is one request, as the access log has it.
type Record struct {
	Start        time.Time `json:"start"`
	Client       string    `json:"client"`
	ForwardedFor string    `json:"forwarded_for"`
	Method       string    `json:"method"`
	Host         string    `json:"host"`
	Path         string    `json:"path"`
	Proto        string    `json:"proto"`
	Status       int       `json:"status"`
	Bytes        int64     `json:"bytes"`
	DurationMS   float64   `json:"duration_ms"`
	Cache        string    `json:"cache"`
	Route        string    `json:"route"`
	ServedBy     string    `json:"served_by"`
	Node         string    `json:"node"`
	TraceID      string    `json:"trace_id"`
	Referer      string    `json:"referer"`
	UserAgent    string    `json:"user_agent"`
	// Key is the cache key ("" for a request that bypassed the cache),
	// RequestID the request's X-Request-Id, and Reason the rule that
	// decided an answer that was not a plain hit (Cache-Status detail).
	Key       string `json:"key"`
	RequestID string `json:"request_id"`
	Reason    string `json:"reason"`
}

// NCSA is r in the NCSA combined log format, varnishncsa's default:
// host - - [time] "request line" status bytes "referer" "user agent".
func (r *Record) NCSA() string {
	bytes := "-"
	if r.Bytes > 0 {
		bytes = strconv.FormatInt(r.Bytes, 10)
	}
	q := func(s string) string {
		if s == "" {
			return "-"
		}
		return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
	}
	return r.Client + " - - [" + r.Start.Format("02/Jan/2006:15:04:05 -0700") + `] "` + q(r.Method+" "+r.Path+" "+r.Proto) + `" ` +
		strconv.Itoa(r.Status) + " " + bytes + ` "` + q(r.Referer) + `" "` + q(r.UserAgent) + `"`
}

// Limits: streams open at once on a node, records a second one stream
// gets by default and at most, and records a stream holds while its
// reader catches up.
const (
	MaxStreams  = 8
	DefaultRate = 200
	MaxRate     = 5000
	queue       = 256
)

// ErrTooMany: MaxStreams are open already; ErrStopping: the node stops.
var (
	ErrTooMany  = errors.New("logstream: too many log streams open on this node")
	ErrStopping = errors.New("logstream: the node is stopping")
)

// Hub fans records out to the open streams.
type Hub struct {
	mu      sync.Mutex
	streams map[*Stream]struct{}
	open    atomic.Int32
	done    chan struct{} // closed by Shutdown
	closed  bool
	now     func() time.Time // nil: time.Now
}

// Shutdown ends every stream, and refuses new ones: the node is stopping.
func (h *Hub) Shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.doneLocked())
	}
}

// Done is closed when the node stops: streams end then.
func (h *Hub) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.doneLocked()
}

func (h *Hub) doneLocked() chan struct{} {
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

// Active reports whether any stream is open: the request path builds a
// record only then.
func (h *Hub) Active() bool { return h != nil && h.open.Load() > 0 }

// Publish offers r to every stream whose filter it passes. It never waits.
func (h *Hub) Publish(r *Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clock := h.now
	if clock == nil {
		clock = time.Now
	}
	now := clock().Unix()
	for s := range h.streams {
		if !s.match(r) {
			continue
		}
		if s.second != now {
			s.second, s.sent = now, 0
		}
		if s.sent >= s.rate {
			s.Dropped.Add(1)
			continue
		}
		select {
		case s.C <- r:
			s.sent++
		default:
			s.Dropped.Add(1) // the reader is behind
		}
	}
}

// Open starts a stream of the records that pass f, at most rate a second.
func (h *Hub) Open(f admin.LogFilter, rate int) (*Stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrStopping
	}
	if len(h.streams) >= MaxStreams {
		return nil, ErrTooMany
	}
	if rate <= 0 {
		rate = DefaultRate
	}
	s := &Stream{C: make(chan *Record, queue), f: f, rate: min(rate, MaxRate)}
	if h.streams == nil {
		h.streams = map[*Stream]struct{}{}
	}
	h.streams[s] = struct{}{}
	h.open.Store(int32(len(h.streams)))
	return s, nil
}

// Close ends s.
func (h *Hub) Close(s *Stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.streams, s)
	h.open.Store(int32(len(h.streams)))
}

// Stream is one operator's view of the log.
type Stream struct {
	C       chan *Record
	Dropped atomic.Uint64 // records that passed the filter but not the rate or the queue
	f       admin.LogFilter
	rate    int
	second  int64
	sent    int
}

func (s *Stream) match(r *Record) bool {
	f := s.f
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.Contains(h, "]") {
		host = h
	}
	return (f.Host == "" || strings.EqualFold(host, f.Host)) && strings.HasPrefix(r.Path, f.PathPrefix) && f.MatchStatus(r.Status) &&
		(f.Cache == "" || r.Cache == f.Cache) && (f.Route == "" || r.Route == f.Route) &&
		(f.MinDuration == 0 || r.DurationMS >= float64(f.MinDuration)/float64(time.Millisecond))
}

// Line is r as one line of the stream: JSON, or NCSA.
func Line(r *Record, ncsa bool) []byte {
	if ncsa {
		return []byte(r.NCSA() + "\n")
	}
	b, _ := json.Marshal(r)
	return append(b, '\n')
}
