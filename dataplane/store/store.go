package store

import (
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/sketch"
)

// Config sizes a Store.
type Config struct {
	// Dir is the disk tier's directory; created if missing.
	Dir string
	// DiskBytes is the disk tier's budget: the record files' total size.
	DiskBytes int64
	// MinFreeBytes is the free space the disk tier leaves on its file
	// system: below it, new objects are not stored.
	MinFreeBytes int64
	// MemoryBytes is the memory tier's budget.
	MemoryBytes int64
	// MemoryMaxObject is the largest stored body held in memory; larger
	// ones are served from disk.
	MemoryMaxObject int64
	// AdmissionPeriod is how often the disk tier's admission halves its
	// request counts, so that they follow the recent rate. Default 1
	// minute; negative: no admission, every object stored (sampled LRU).
	AdmissionPeriod time.Duration
	// Sync makes every record reach the disk (fsync) before it is renamed
	// into place: a stored object then survives a power failure. Without
	// it a crash may lose the records written in the last seconds (a torn
	// one is never served: its checksum fails).
	Sync bool
	// Group names the group a key belongs to, if any: the store keeps each
	// group's keys (Members, Count) as exactly as its index. The owner
	// groups a URL's Vary variants under the URL's key.
	Group  func(key string) (string, bool)
	Logger *slog.Logger
}

// Store is the two tiers together. Every object is on disk; small ones are
// also held in memory, promoted there on a disk hit.
type Store struct {
	mem    *Memory
	disk   *disk
	memMax int64
	log    *slog.Logger
	// freq counts lookups by key, for the disk tier's admission; nil when
	// it is off.
	freq *sketch.Sketch
	sync bool // fsync each record before it is renamed into place
}

// Open opens or creates the store in cfg.Dir and starts rebuilding its
// index from the records there; Ready is closed when that is done.
func Open(cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DiskBytes <= 0 {
		return nil, fmt.Errorf("store: disk budget %d bytes; it must be positive", cfg.DiskBytes)
	}
	mem, err := NewMemory(cfg.MemoryBytes)
	if err != nil {
		return nil, err
	}
	d, err := openDisk(cfg.Dir, cfg.DiskBytes, cfg.MinFreeBytes, cfg.Group, cfg.Logger)
	if err != nil {
		mem.Close()
		return nil, err
	}
	d.onEvict = mem.Delete // memory holds only what disk holds
	s := &Store{mem: mem, disk: d, memMax: cfg.MemoryMaxObject, log: cfg.Logger, sync: cfg.Sync}
	if cfg.AdmissionPeriod >= 0 {
		// Its own sketch, not the hot-key one: that one halves every few
		// seconds to spot a burst, this one follows the slower rate at
		// which the disk tier's contents turn over.
		s.freq = sketch.New(1<<16, cmp.Or(cfg.AdmissionPeriod, time.Minute), nil)
		d.freq = s.freq.Estimate
	}
	return s, nil
}

// Ready is closed once the index holds every record found on disk.
func (s *Store) Ready() <-chan struct{} { return s.disk.ready }

// Loaded is the number of records indexed so far at start.
func (s *Store) Loaded() int64 { return s.disk.loaded.Load() }

// Close stops the store's goroutines. Files stay for the next Open.
func (s *Store) Close() {
	close(s.disk.stop)
	s.disk.loading.Wait()
	s.mem.Close()
}

// Get returns key's entry: from memory, else from disk (a small one is
// read whole, checked and promoted to memory). A record found bad is
// discarded and reported as a miss.
func (s *Store) Get(key string) (*Entry, bool) {
	if s.freq != nil {
		s.freq.Observe(key)
	}
	de := s.disk.lookup(key)
	if e, ok := s.mem.Get(key); ok {
		// The memory tier applies its sets a little later: a promotion
		// of a version an update has since replaced may land after the
		// update. Only the disk index's current record is served.
		if e.disk == nil || e.disk == de {
			e.touch()
			return e, true
		}
		s.mem.Delete(key)
	}
	if de == nil {
		return nil, false
	}
	de.access.Store(clock())
	if e := de.meta.Load(); e != nil {
		return e, true
	}
	e, err := s.readEntry(de)
	if err != nil {
		return nil, false
	}
	return e, true
}

// Peek returns key's entry without counting a use of it: from memory when
// it is there, else the metadata of its disk record (no body). Purges use
// it to look at every stored object without promoting any.
func (s *Store) Peek(key string) (*Entry, bool) {
	de := s.disk.lookup(key)
	if de == nil {
		return nil, false
	}
	if e, ok := s.mem.Get(key); ok {
		return e, true
	}
	if e := de.meta.Load(); e != nil {
		return e, true
	}
	_, p := s.disk.path(key)
	f, err := os.Open(p)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	e, err := readHead(f, make([]byte, 4096))
	if err != nil {
		return nil, false
	}
	return e, true
}

// readEntry reads de's record: its metadata, and its body if it is small
// enough for memory.
func (s *Store) readEntry(de *diskEntry) (*Entry, error) {
	_, p := s.disk.path(de.key)
	f, err := os.Open(p)
	if err != nil {
		s.lost(de, p, err)
		return nil, err
	}
	defer f.Close()
	e, ft, err := s.checkRecord(f, de, p)
	if err != nil {
		return nil, err
	}
	if e.Size > s.memMax {
		de.meta.Store(e)
		return e, nil
	}
	body := make([]byte, e.Size)
	if _, err := f.ReadAt(body, e.off); err != nil {
		s.disk.discard(p, de, badRecord(badLength, "body cut short: %v", err))
		return nil, err
	}
	if got := crc32.Checksum(body, crcTable); got != ft.crc {
		err := badRecord(badChecksum, "body checksum %08x, want %08x", got, ft.crc)
		s.disk.discard(p, de, err)
		return nil, err
	}
	de.verified.Store(true)
	e.Body = body
	s.mem.Offer(e)
	return e, nil
}

// checkRecord reads and checks f's head and footer.
func (s *Store) checkRecord(f *os.File, de *diskEntry, p string) (*Entry, footer, error) {
	st, err := f.Stat()
	if err != nil {
		s.disk.warn("read", err, "file", p)
		return nil, footer{}, err
	}
	e, err := readHead(f, make([]byte, 4096))
	if err == nil && e.Key != de.key {
		err = badRecord(badKey, "record holds key %q, want %q", e.Key, de.key)
	}
	var ft footer
	if err == nil {
		ft, err = readFooter(f, e.off, st.Size())
	}
	if err != nil {
		s.disk.discard(p, de, err)
		return nil, footer{}, err
	}
	e.Size, e.Length, e.disk = ft.size, ft.length, de
	return e, ft, nil
}

// lost handles a record that could not be opened: gone from disk (removed
// behind the store's back) or unreadable.
func (s *Store) lost(de *diskEntry, p string, err error) {
	if errors.Is(err, fs.ErrNotExist) {
		s.disk.mu.Lock()
		s.disk.forgetLocked(de)
		s.disk.mu.Unlock()
		return
	}
	s.disk.warn("read", err, "file", p)
}

// Open returns e's body for reading, positioned at its start: e.Size bytes
// follow. A body not checked since the store opened is checked first; a
// bad one is discarded and an error returned. The caller closes the file.
func (s *Store) Open(e *Entry) (*os.File, error) {
	de := e.disk
	if de == nil {
		return nil, errors.New("store: entry has no record on disk")
	}
	_, p := s.disk.path(de.key)
	f, err := os.Open(p)
	if err != nil {
		s.lost(de, p, err)
		return nil, err
	}
	if !de.verified.Load() {
		if err := s.verify(f, de, p); err != nil {
			f.Close()
			return nil, err
		}
	}
	if _, err := f.Seek(e.off, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// verify checks a whole record, body included.
func (s *Store) verify(f *os.File, de *diskEntry, p string) error {
	e, ft, err := s.checkRecord(f, de, p)
	if err != nil {
		return err
	}
	h := crc32.New(crcTable)
	if _, err := io.Copy(h, io.NewSectionReader(f, e.off, e.Size)); err != nil {
		s.disk.warn("read", err, "file", p)
		return err
	}
	if got := h.Sum32(); got != ft.crc {
		err := badRecord(badChecksum, "body checksum %08x, want %08x", got, ft.crc)
		s.disk.discard(p, de, err)
		return err
	}
	de.verified.Store(true)
	return nil
}

// Delete removes key from both tiers.
func (s *Store) Delete(key string) bool {
	s.mem.Delete(key)
	return s.disk.remove(key)
}

// Members returns the keys stored in group g (Config.Group).
func (s *Store) Members(g string) []string { return s.disk.members(g) }

// Count returns how many keys are stored in group g (Config.Group).
func (s *Store) Count(g string) int { return s.disk.count(g) }

// Keys calls fn with every stored key until fn returns false, for purges
// by prefix. Keys stored meanwhile may or may not be seen.
func (s *Store) Keys(fn func(key string) bool) { s.disk.keys(fn) }

// Stats are the store's sizes and event counts.
type Stats struct {
	MemoryBytes, MemoryObjects int64
	DiskBytes, DiskObjects     int64
	// Paused is true while the free-space guard refuses new objects.
	Paused bool
	// Discarded counts bad records found, by reason; Errors counts disk
	// errors, by operation.
	Discarded, Errors map[string]uint64
	// Admitted, Evicted and Rejected count objects by tier ("memory",
	// "disk") since start: stored, evicted to make room, refused by the
	// tier's admission.
	Admitted, Evicted, Rejected map[string]uint64
}

// Stats returns the store's current figures.
func (s *Store) Stats() Stats {
	st := Stats{Paused: s.disk.paused.Load(), Discarded: map[string]uint64{}, Errors: map[string]uint64{}}
	ma, me, mr := s.mem.Counts()
	st.Admitted = map[string]uint64{"memory": ma, "disk": s.disk.admitted.Load()}
	st.Evicted = map[string]uint64{"memory": me, "disk": s.disk.evicted.Load()}
	st.Rejected = map[string]uint64{"memory": mr, "disk": s.disk.rejected.Load()}
	st.MemoryBytes, st.MemoryObjects = s.mem.Stats()
	st.DiskBytes, st.DiskObjects = s.disk.stats()
	for k, v := range s.disk.counts.discarded {
		st.Discarded[k] = v.Load()
	}
	for k, v := range s.disk.counts.errors {
		st.Errors[k] = v.Load()
	}
	return st
}
