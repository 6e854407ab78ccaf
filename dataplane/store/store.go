package store

import (
	"cmp"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/sketch"
)

// Config sizes a Store.
type Config struct {
	// Dir is the disk tier's directory; created if missing.
	Dir string
	// DiskBytes is the disk tier's budget: the data file's size once every
	// segment is in use. At least 256 KiB, under 2 TiB.
	DiskBytes int64
	// MinFreeBytes is the free space the disk tier leaves on its file
	// system: below it, the data file does not grow.
	MinFreeBytes int64
	// MemoryBytes is the memory tier's budget, the probation queue's
	// included.
	MemoryBytes int64
	// MemoryMaxObject is the largest stored body held in memory; larger
	// ones are served from disk.
	MemoryMaxObject int64
	// ProbationBytes is the part of MemoryBytes that holds new objects
	// until their second use: one asked for once never reaches the disk.
	// 0 means MemoryBytes/32: as few writes are saved as with a tenth (the
	// admission turns most once-asked objects away anyway), and each object
	// held there is one of the least asked for that the node holds, so a
	// larger queue holds more of those. Negative, or no admission (it
	// counts the uses): every object goes to disk at once.
	ProbationBytes int64
	// AdmissionPeriod is how often the disk tier's admission halves its
	// request counts, so that they follow the recent rate. Default 1
	// minute; negative: no admission, every object stored.
	AdmissionPeriod time.Duration
	// Sync makes each flushed write buffer reach the disk (fdatasync)
	// before the fills in it are committed: one sync per buffer, not per
	// object (group commit). A committed object then survives a power
	// failure. Without it a power failure may lose what the kernel had not
	// yet written back; a torn record is never served.
	Sync bool
	// CheckpointPeriod is how often the index is saved, when it changed,
	// so that a start reads it instead of every segment. Default 30 s.
	CheckpointPeriod time.Duration
	// Group names the group a key belongs to, if any: the store keeps each
	// group's keys (Members, Count) as exactly as its index. The owner
	// groups a URL's Vary variants under the URL's key.
	Group  func(key string) (string, bool)
	Logger *slog.Logger

	// fault, in tests, fails the data file's writes, syncs and allocations.
	fault func(op string) error
}

// Store is the two tiers together: the disk tier holds every object but
// new ones on probation; small ones are also held in memory, promoted
// there on a disk hit.
type Store struct {
	mem    *Memory
	disk   *disk
	memMax int64
	log    *slog.Logger
	// freq counts lookups by key, for the disk tier's admission; nil when
	// it is off.
	freq      *sketch.Sketch
	probation bool
	promote   chan *Entry // second uses of objects on probation
	ckptEvery time.Duration
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Open opens or creates the store in cfg.Dir and starts loading its
// index; Ready is closed when that is done.
func Open(cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g, err := geometryFor(cfg.DiskBytes)
	if err != nil {
		return nil, err
	}
	prob := cfg.ProbationBytes
	if prob == 0 {
		prob = cfg.MemoryBytes / 32
	}
	mem, err := NewMemory(cfg.MemoryBytes - max(prob, 0))
	if err != nil {
		return nil, err
	}
	d, err := openDisk(cfg, g)
	if err != nil {
		mem.Close()
		return nil, err
	}
	d.groups.init(cfg.Group, g.nstripes)
	for _, st := range d.stripes {
		st.probation.max = max(prob, 0) / int64(g.nstripes)
	}
	s := &Store{mem: mem, disk: d, memMax: cfg.MemoryMaxObject, log: cfg.Logger, probation: prob > 0 && cfg.AdmissionPeriod >= 0,
		promote: make(chan *Entry, 1024), ckptEvery: cmp.Or(cfg.CheckpointPeriod, 30*time.Second), stop: make(chan struct{})}
	if cfg.AdmissionPeriod >= 0 {
		// Its own sketch, not the hot-key one: that one halves every few
		// seconds to spot a burst, this one follows the slower rate at
		// which the disk tier's contents turn over.
		s.freq = sketch.New(1<<16, cmp.Or(cfg.AdmissionPeriod, time.Minute), nil)
		d.freqOf = s.freq.EstimateHash
	}
	s.wg.Go(s.start)
	return s, nil
}

// start loads the index, then runs the store's background work.
func (s *Store) start() {
	old := s.disk.discardOldLayout()
	s.disk.load(s.stop)
	select {
	case <-s.stop:
		return // cut short: the index is partial, and Close must not save it
	default:
	}
	s.disk.loading.Store(false)
	close(s.disk.ready)
	if len(old) > 0 {
		s.wg.Go(func() { s.disk.removeAll(old, s.stop) })
	}
	s.wg.Go(s.promoter)
	s.maintain()
}

// Ready is closed once the index holds every record found on disk.
func (s *Store) Ready() <-chan struct{} { return s.disk.ready }

// Loaded is the number of records indexed so far at start.
func (s *Store) Loaded() int64 { return s.disk.loaded.Load() }

// Close writes out what is buffered and on probation, saves the index and
// stops the store's goroutines. The data stays for the next Open.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		if !s.disk.loading.Load() {
			for _, st := range s.disk.stripes {
				for _, e := range st.probation.all() {
					s.promoteOne(e)
				}
			}
			s.disk.flushAll(true)
			if err := s.disk.checkpoint(); err != nil {
				s.disk.warn("checkpoint", err)
			}
		}
		s.disk.close()
		s.mem.Close()
	})
}

// maintain writes out buffers idle for a moment and checkpoints the
// index, until the store closes.
func (s *Store) maintain() {
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	last, checked := time.Now(), time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-flush.C:
		}
		if time.Since(checked) >= time.Second {
			checked = time.Now()
			s.disk.checkFile()
		}
		s.disk.flushAll(false)
		if time.Since(last) >= s.ckptEvery && s.disk.dirty.Load() != 0 {
			last = time.Now()
			if err := s.disk.checkpoint(); err != nil {
				s.disk.warn("checkpoint", err)
			}
		}
	}
}

// retryAfter is how long a stripe stopped by a disk error waits before it
// tries to write again.
const retryAfter = 30 * time.Second

// flushAll writes out every stripe's buffer that has waited for 100 ms
// (all of them when now is set), and lets a stripe stopped for a while
// try again.
func (d *disk) flushAll(now bool) {
	for _, st := range d.stripes {
		st.mu.Lock()
		if st.failed != nil && time.Since(st.failedAt) > retryAfter {
			d.log.Info("disk tier stripe tries writing again", "stripe", st.id, "stopped_by", st.failed)
			if st.cur != nil {
				d.seal(st.cur) // the next write opens a new segment
			}
			st.failed, st.cur = nil, nil
			st.buf, st.bufStart = st.buf[:0], 0
			st.curIdx.Store(-1)
		}
		if len(st.buf) > 0 && (now || time.Since(st.dirtySince) >= 100*time.Millisecond) {
			st.flushLocked()
		}
		if now {
			st.drainLocked()
		}
		st.mu.Unlock()
	}
}

// Get returns key's entry: from memory (or probation), else from disk (a
// small one is read whole, checked and promoted to memory). A record found
// bad is discarded and reported as a miss.
func (s *Store) Get(key string) (*Entry, bool) {
	h := keyHash(key)
	if s.freq != nil {
		s.freq.ObserveHash(freqKey(h))
	}
	return s.get(key, h, true)
}

func (s *Store) get(key string, h uint64, use bool) (*Entry, bool) {
	st := s.disk.stripeOf(h)
	v, seg, onDisk := st.lookup(h, use)
	if onDisk {
		defer seg.unpin()
	}
	if e, ok := s.mem.Get(key); ok {
		// The memory tier applies its sets a little later: a promotion
		// of a version an update has since replaced may land after the
		// update. Only the index's current record is served.
		if onDisk && e.ref != nil && e.ref.matches(v, seg) {
			return e, true
		}
		s.mem.Delete(key)
	}
	if e := st.onProbation(key); e != nil {
		if use {
			select {
			case s.promote <- e: // its second use: it goes to disk
			default:
			}
		}
		return e, true
	}
	if !onDisk {
		return nil, false
	}
	whole := int64(headRead)
	if use {
		whole = max(whole, s.memMax+headRead)
	}
	e, err := s.disk.readRecord(st, key, v, seg, whole)
	if err != nil {
		if !errors.Is(err, errOtherKey) {
			s.discard(st, v, err)
		}
		return nil, false
	}
	if e.Body != nil && e.Size <= s.memMax && use {
		s.mem.Offer(e)
	} else if e.Size > s.memMax || !use {
		e.Body = nil // metadata only: the body is read with Open
	}
	return e, true
}

// Peek returns key's entry without counting a use of it: from memory when
// it is there, else the metadata of its disk record (no body). Purges use
// it to look at every stored object without promoting any.
func (s *Store) Peek(key string) (*Entry, bool) { return s.get(key, keyHash(key), false) }

// discard drops a bad record from the index: logged, counted, never served.
func (s *Store) discard(st *stripe, v slot, err error) {
	if reasonOf(err) == "io" {
		return // the disk failed to read, the record may be fine
	}
	s.disk.discarded(int64(v.off)*unit, err)
	st.imu.Lock()
	if cur := st.tab.find(v.ident()); cur != nil && cur.off == v.off {
		st.tab.remove(v.ident())
	}
	st.imu.Unlock()
	s.disk.groups.evicted(st.id, []ident{v.ident()})
	s.disk.dirty.Add(1)
}

// Open returns e's body on disk, positioned at its first byte: e.Size
// bytes follow. A body not checked since the store opened is checked
// first; a bad one is discarded and an error returned. The caller closes
// the Body.
func (s *Store) Open(e *Entry) (*Body, error) {
	r := e.ref
	if r == nil {
		return nil, errors.New("store: entry has no record on disk")
	}
	st := s.disk.stripeOf(r.hash)
	gen := s.disk.fds.generation()
	v, seg, ok := st.lookup(r.hash, false)
	if !ok {
		return nil, ErrGone
	}
	if !r.matches(v, seg) {
		seg.unpin()
		return nil, ErrGone
	}
	if err := st.written(seg, r.off+r.n); err != nil {
		seg.unpin()
		return nil, err
	}
	if v.flags&slotVerified == 0 && !e.verified {
		if err := s.disk.verify(r); err != nil {
			seg.unpin()
			s.discard(st, v, err)
			return nil, err
		}
		st.imu.RLock()
		if cur := st.tab.find(v.ident()); cur != nil && cur.off == v.off {
			setFlag(cur, slotVerified)
		}
		st.imu.RUnlock()
	}
	f, fgen, err := s.disk.fds.get()
	if err == nil && fgen != gen {
		s.disk.fds.put(f, fgen)
		seg.unpin()
		return nil, ErrGone // the data file was replaced meanwhile
	}
	if err == nil {
		_, err = f.Seek(r.body, 0)
	}
	if err != nil {
		seg.unpin()
		s.disk.warn("read", err)
		return nil, err
	}
	return &Body{f: f, gen: fgen, seg: seg, pool: &s.disk.fds, start: r.body, end: r.body + e.Size, pos: r.body}, nil
}

// Delete removes key from both tiers; fills of key in progress, and of
// the keys grouped under it, are not stored after it.
func (s *Store) Delete(key string) bool {
	// The fills in progress of the keys grouped under key (its variants)
	// are dropped first, though none of theirs is stored yet: a variant
	// stored before this is a member by the time Delete returns.
	for _, w := range s.disk.groups.fillsOf(key) {
		w.st.mu.Lock()
		w.st.imu.Lock()
		w.dropped = true
		w.st.imu.Unlock()
		w.st.mu.Unlock()
	}
	h := keyHash(key)
	st := s.disk.stripeOf(h)
	st.mu.Lock()
	st.imu.Lock()
	old := st.tab.remove(identOf(h))
	prob := st.probation.remove(key)
	for _, w := range st.fills[h] {
		w.dropped = true // a fill of the version deleted is not stored after it
	}
	st.imu.Unlock()
	if old.tag != 0 {
		// The tombstone keeps the delete through a restart, written at once
		// (and synced with Sync): a purge is not undone by a crash. If the
		// stripe stopped writing, the next checkpoint keeps it.
		if _, _, err := st.appendLocked(smallRecord(kindTombstone, 0, h, nil)); err == nil {
			st.flushLocked()
		}
		s.disk.dirty.Add(1)
	}
	st.mu.Unlock()
	s.mem.Delete(key)
	if old.tag != 0 {
		s.disk.groups.evicted(st.id, []ident{identOf(h)})
	}
	if prob != nil {
		s.disk.groups.leave(key, inProbation)
	}
	return old.tag != 0 || prob != nil
}

// Members returns the keys stored in group g (Config.Group).
func (s *Store) Members(g string) []string { return s.disk.groups.members(g) }

// Count returns how many keys are stored in group g (Config.Group).
func (s *Store) Count(g string) int { return s.disk.groups.count(g) }

// Keys calls fn with every stored key until fn returns false, for purges
// by prefix. It reads each key from its record (the index holds none);
// keys stored meanwhile may or may not be seen.
func (s *Store) Keys(fn func(key string) bool) {
	for _, st := range s.disk.stripes {
		st.imu.RLock()
		slots := make([]slot, 0, st.tab.n)
		st.tab.each(func(v *slot) bool { slots = append(slots, *v); return true })
		prob := st.probation.keys()
		st.imu.RUnlock()
		for _, k := range prob {
			if !fn(k) {
				return
			}
		}
		for _, v := range slots {
			k, ok := s.disk.keyOf(st, v)
			if ok && !fn(k) {
				return
			}
		}
	}
}
