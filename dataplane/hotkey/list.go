// Package hotkey remembers the keys a node has seen hot, with what rebuilds
// a request for each, so that a node gaining them in a ring change can
// take them from their previous owners before clients ask (pre-copy).
package hotkey

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/sketch"
)

// ListMax bounds the hot keys a List remembers, and so those a peer may
// send in its list.
const ListMax = 4096

// MaxListBytes bounds a hot-key list sent to a peer, as JSON: a node sends
// its hottest keys up to it, and a list past it is refused whole. 4096 keys
// with URLs of a few hundred bytes fit several times over.
const MaxListBytes = 4 << 20

// List remembers the keys a node has seen hot, with what rebuilds a
// request for each (for pre-copy): safe for concurrent use, and cheap for a
// key already in it. It holds at most ListMax keys; at the bound a key not
// seen hot for a minute makes room, and a new key is dropped until one does.
type List struct {
	keys  sync.Map // key -> *Key
	count atomic.Int64
	prune atomic.Int64 // UnixNano of the last prune
}

// Key is what rebuilds a request for a hot key.
type Key struct {
	Key  string  `json:"key"`
	Host string  `json:"host"`
	URI  string  `json:"uri"`
	Rate float64 `json:"rate"` // when listed: requests per minute, estimated
	// Shown is Key as operators' views show it (policy.ShownKey): the
	// node's own, never sent to a peer.
	Shown string `json:"-"`
	seen  atomic.Int64
}

// Note records that key, asked for by r at now, is hot; shown is the key
// as operators' views show it.
func (h *List) Note(key, shown string, r *http.Request, at time.Time) {
	now := at.UnixNano()
	if v, ok := h.keys.Load(key); ok {
		if k := v.(*Key); now-k.seen.Load() > int64(time.Second) {
			k.seen.Store(now)
		}
		return
	}
	if h.count.Load() >= ListMax {
		if !h.pruneOld(now) {
			return
		}
	}
	k := &Key{Key: key, Host: r.Host, URI: r.URL.RequestURI(), Shown: shown}
	k.seen.Store(now)
	if _, loaded := h.keys.LoadOrStore(key, k); !loaded {
		h.count.Add(1)
	}
}

// pruneOld drops the keys not seen hot for a minute, at most every ten
// seconds; it reports whether there is room now.
func (h *List) pruneOld(now int64) bool {
	last := h.prune.Load()
	if now-last < int64(10*time.Second) || !h.prune.CompareAndSwap(last, now) {
		return false
	}
	h.keys.Range(func(key, v any) bool {
		if now-v.(*Key).seen.Load() > int64(time.Minute) {
			h.keys.Delete(key)
			h.count.Add(-1)
		}
		return true
	})
	return h.count.Load() < ListMax
}

// Hottest lists up to limit of the keys, hottest first by s's estimate.
func (h *List) Hottest(s *sketch.Sketch, limit int) []*Key {
	var out []*Key
	h.keys.Range(func(_, v any) bool {
		k := v.(*Key)
		out = append(out, &Key{Key: k.Key, Host: k.Host, URI: k.URI, Shown: k.Shown, Rate: float64(s.Estimate(k.Key))})
		return true
	})
	slices.SortFunc(out, func(a, b *Key) int { return cmp.Compare(b.Rate, a.Rate) })
	return out[:min(limit, len(out))]
}

// ErrListTooLong is a peer's hot-key list past ListMax keys or MaxListBytes.
var ErrListTooLong = errors.New("hotkey: list too long")

// Encode writes keys to w as a JSON array, the hottest first (as given),
// leaving out the keys that would take it past MaxListBytes.
func Encode(w io.Writer, keys []*Key) error {
	out := make([]byte, 0, 1<<10)
	out = append(out, '[')
	for _, k := range keys[:min(len(keys), ListMax)] {
		b, err := json.Marshal(k)
		if err != nil {
			return err
		}
		sep := 0
		if len(out) > 1 {
			sep = 1 // the comma before it
		}
		if len(out)+sep+len(b)+2 > MaxListBytes { // and "]\n" after
			continue // a shorter, colder key may still fit
		}
		if sep > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	out = append(out, ']', '\n')
	_, err := w.Write(out)
	return err
}

// Decode reads a peer's hot-key list from r, reading at most MaxListBytes
// (and one more byte) and keeping at most ListMax keys: a longer list is
// refused with ErrListTooLong, having been read no further.
func Decode(r io.Reader) ([]*Key, error) {
	lr := &io.LimitedReader{R: r, N: MaxListBytes + 1}
	dec := json.NewDecoder(lr)
	tooLong := func() error {
		return fmt.Errorf("%w: more than %d keys or %d bytes", ErrListTooLong, ListMax, MaxListBytes)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		if lr.N <= 0 {
			return nil, tooLong()
		}
		return nil, fmt.Errorf("hotkey: reading a list: want a JSON array (%v)", err)
	}
	var keys []*Key
	for dec.More() {
		if len(keys) == ListMax {
			return nil, tooLong()
		}
		k := &Key{}
		if err := dec.Decode(k); err != nil {
			if lr.N <= 0 {
				return nil, tooLong()
			}
			return nil, fmt.Errorf("hotkey: reading key %d of a list: %w", len(keys), err)
		}
		keys = append(keys, k)
	}
	if _, err := dec.Token(); err != nil {
		if lr.N <= 0 {
			return nil, tooLong()
		}
		return nil, fmt.Errorf("hotkey: reading the end of a list: %w", err)
	}
	if lr.N <= 0 {
		return nil, tooLong()
	}
	return keys, nil
}
