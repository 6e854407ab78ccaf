// Package demo is the demo origin that `shardcache dev` fronts when no real
// origin is given: GET /obj/<id>?size=N returns N deterministic bytes that a
// shared cache may store for an hour. Range and conditional requests work,
// so large-object and revalidation paths can be tried against it.
package demo

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// MaxSize is the largest object the demo origin makes (64 GiB).
const MaxSize = 64 << 30

// lastModified is fixed so that validators are stable across restarts.
var lastModified = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Origin serves deterministic objects and counts the requests it answers.
type Origin struct {
	requests atomic.Int64
}

// Requests is how many object requests the origin answered.
func (o *Origin) Requests() int64 { return o.requests.Load() }

// ServeHTTP serves /obj/<id>, /_stats and an index at /.
func (o *Origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/obj/"):
		o.serveObject(w, r)
	case r.URL.Path == "/_stats":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]int64{"requests": o.Requests()})
	case r.URL.Path == "/":
		fmt.Fprintln(w, "shardcache demo origin: GET /obj/<id>?size=N returns N deterministic, cacheable bytes")
	default:
		http.NotFound(w, r)
	}
}

func (o *Origin) serveObject(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/obj/")
	if id == "" || strings.Contains(id, "/") {
		http.Error(w, "want /obj/<id>", http.StatusNotFound)
		return
	}
	size := int64(1024)
	if s := r.URL.Query().Get("size"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > MaxSize {
			http.Error(w, fmt.Sprintf("size must be an integer from 0 to %d", int64(MaxSize)), http.StatusBadRequest)
			return
		}
		size = n
	}
	o.requests.Add(1)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("ETag", fmt.Sprintf(`"%s-%d"`, id, size))
	http.ServeContent(w, r, "", lastModified, NewBody(id, size))
}

// Body is an object's content: bytes computed from the id and the
// position, so any range can be read without storing the object.
type Body struct {
	seed uint64
	size int64
	pos  int64
}

// NewBody returns the content of object id with size bytes.
func NewBody(id string, size int64) *Body {
	h := fnv.New64a()
	h.Write([]byte(id))
	return &Body{seed: h.Sum64(), size: size}
}

// Read fills p with the next bytes of the object.
func (b *Body) Read(p []byte) (int, error) {
	if b.pos >= b.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), b.size-b.pos)]
	var word [8]byte
	for i := range p {
		off := b.pos + int64(i)
		if i == 0 || off%8 == 0 {
			binary.LittleEndian.PutUint64(word[:], mix(b.seed+uint64(off/8)))
		}
		p[i] = word[off%8]
	}
	b.pos += int64(len(p))
	return len(p), nil
}

// Seek moves the read position, as http.ServeContent needs for ranges.
func (b *Body) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += b.pos
	case io.SeekEnd:
		offset += b.size
	default:
		return 0, errors.New("demo: invalid whence")
	}
	if offset < 0 {
		return 0, errors.New("demo: negative position")
	}
	b.pos = offset
	return offset, nil
}

// mix is splitmix64's finaliser.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
