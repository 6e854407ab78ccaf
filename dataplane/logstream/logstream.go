// Package logstream hands access-log records to the operators streaming
// them (cachectl log), without ever slowing a request: a record goes to a
// stream only when the stream keeps up, within its rate; otherwise it is
// dropped and counted.
package logstream

import (
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/sdk/admin"
)

// Record is one request, as the access log has it.
type Record = admin.LogRecord

// Limits: streams open at once on a node, records a second one stream
// gets by default and at most, and records a stream holds while its
// reader catches up.
const (
	MaxStreams  = 8
	MaxCaller   = MaxStreams / 2 // streams one caller (OpenFor) may hold
	DefaultRate = 200
	MaxRate     = 5000
	queue       = 256
)

// ErrTooMany: MaxStreams are open already; ErrCallerTooMany: the caller
// holds MaxCaller; ErrStopping: the node stops.
var (
	ErrTooMany       = errors.New("logstream: too many log streams open on this node")
	ErrCallerTooMany = errors.New("logstream: this caller holds as many log streams as one may; close one")
	ErrStopping      = errors.New("logstream: the node is stopping")
)

// Hub fans records out to the open streams.
type Hub struct {
	mu      sync.Mutex
	streams map[*Stream]struct{}
	open    atomic.Int32
	full    atomic.Int32  // streams that take full records
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

// FullActive reports whether a stream that takes full records is open:
// the request path keeps an account of a request only then.
func (h *Hub) FullActive() bool { return h != nil && h.full.Load() > 0 }

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
func (h *Hub) Open(f admin.LogFilter, rate int) (*Stream, error) { return h.OpenFor("", f, rate) }

// OpenFor is Open for caller (its address), who may hold MaxCaller streams
// at most: one caller cannot take every stream from the others.
func (h *Hub) OpenFor(caller string, f admin.LogFilter, rate int) (*Stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrStopping
	}
	if len(h.streams) >= MaxStreams {
		return nil, ErrTooMany
	}
	if caller != "" {
		held := 0
		for s := range h.streams {
			if s.caller == caller {
				held++
			}
		}
		if held >= MaxCaller {
			return nil, ErrCallerTooMany
		}
	}
	if rate <= 0 {
		rate = DefaultRate
	}
	s := &Stream{C: make(chan *Record, queue), f: f, rate: min(rate, MaxRate), full: f.NeedsFull(), caller: caller}
	if h.streams == nil {
		h.streams = map[*Stream]struct{}{}
	}
	h.streams[s] = struct{}{}
	h.countLocked()
	return s, nil
}

// countLocked sets the counts of open and full streams.
func (h *Hub) countLocked() {
	full := 0
	for s := range h.streams {
		if s.full {
			full++
		}
	}
	h.open.Store(int32(len(h.streams)))
	h.full.Store(int32(full))
}

// Close ends s.
func (h *Hub) Close(s *Stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.streams, s)
	h.countLocked()
}

// Stream is one operator's view of the log.
type Stream struct {
	C       chan *Record
	Dropped atomic.Uint64 // records that passed the filter but not the rate or the queue
	f       admin.LogFilter
	full    bool // it takes full records
	caller  string
	rate    int
	second  int64
	sent    int
}

func (s *Stream) match(r *Record) bool { return s.f.Match(r) }

// Full reports whether s takes full records.
func (s *Stream) Full() bool { return s.full }

// Line is r as one line of the stream: JSON, with its full part or (full
// false) without, or NCSA.
func Line(r *Record, ncsa, full bool) []byte {
	if ncsa {
		return []byte(r.NCSA() + "\n")
	}
	if !full && r.Full != nil {
		plain := *r
		plain.Full = nil
		r = &plain
	}
	b, _ := json.Marshal(r)
	return append(b, '\n')
}
