package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrNoSpace is returned when the disk tier does not admit new objects:
// the file system is nearly full, the object is larger than the budget,
// or the stripe it belongs to stopped writing after a disk error.
var ErrNoSpace = errors.New("store: disk tier not admitting: free space below the guard, object over budget, or its stripe stopped after a disk error")

// ErrNotAdmitted: the disk tier is full and the new object is asked for
// less often than the ones it would evict (TinyLFU admission).
var ErrNotAdmitted = errors.New("store: disk tier full, and the object is asked for less often than what it would evict")

// ErrLoading is returned by Create while the index is being loaded.
var ErrLoading = errors.New("store: disk tier index still loading")

// disk is the disk tier: the data file, its segments and stripes.
type disk struct {
	g       geometry
	dir     string
	path    string // the data file
	file    atomic.Pointer[dataFile]
	oldFile []*dataFile  // data files removed under the store, closed at Close
	gen     atomic.Int64 // counts the data files: a fill of an earlier one is not stored
	log     *slog.Logger
	sync    bool
	stripes []*stripe
	fds     fdPool

	poolMu    sync.Mutex // guards the segment states, owned, seq, runCursor
	segs      []*segment
	owned     [][]int // per stripe, its segments oldest first
	seq       uint64  // the newest segment seq
	runCursor int

	allUsed atomic.Bool // every segment was allocated once
	groups  groups
	guard   freeGuard
	counts  counters
	logged  sync.Map // op → last log time, to keep error logs from flooding
	loading atomic.Bool
	loaded  atomic.Int64
	ready   chan struct{}
	// admitted and evicted count records stored and evicted; rejected the
	// new records admission refused.
	admitted, evicted, rejected atomic.Uint64
	rescued                     atomic.Uint64
	// freqOf estimates how often the key of a slot's tag (mixed) is asked
	// for; nil without admission.
	freqOf func(uint64) uint32
	// dirty counts index changes since the last checkpoint.
	dirty atomic.Int64
}

// counters are the disk tier's event counts, by label.
type counters struct {
	discarded map[string]*atomic.Uint64 // by reason
	errors    map[string]*atomic.Uint64 // by operation
}

func newCounters() counters {
	c := counters{discarded: map[string]*atomic.Uint64{}, errors: map[string]*atomic.Uint64{}}
	for _, r := range []string{badFormat, badVersion, badLength, badChecksum, badKey, "io"} {
		c.discarded[r] = new(atomic.Uint64)
	}
	for _, op := range []string{"create", "write", "sync", "read", "allocate", "load", "checkpoint"} {
		c.errors[op] = new(atomic.Uint64)
	}
	return c
}

// dataName is the data file's name in the tier's directory.
const dataName = "segments"

func openDisk(cfg Config, g geometry) (*disk, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: data directory %s is not usable: %w", cfg.Dir, err)
	}
	path := filepath.Join(cfg.Dir, dataName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: data directory %s is not writable: %w", cfg.Dir, err)
	}
	d := &disk{
		g: g, dir: cfg.Dir, path: path, log: cfg.Logger, sync: cfg.Sync,
		fds:    fdPool{path: path},
		segs:   make([]*segment, g.nseg),
		owned:  make([][]int, g.nstripes),
		counts: newCounters(),
		ready:  make(chan struct{}),
		guard:  freeGuard{dir: cfg.Dir, min: cfg.MinFreeBytes, log: cfg.Logger},
	}
	d.file.Store(&dataFile{f: f, fault: cfg.fault})
	for i := range d.segs {
		d.segs[i] = &segment{idx: i}
	}
	for i := range g.nstripes {
		d.stripes = append(d.stripes, newStripe(d, i))
	}
	d.loading.Store(true)
	return d, nil
}

// spoolMax is the largest record a fill holds in memory until its commit:
// larger ones of a known length are written in place as they stream, and
// larger ones of unknown length are not stored. It is bound by the
// segment's power of two, not its room for a head: an object of that size
// is written in place, as before the room was added (spooled, it would be
// copied twice).
func (d *disk) spoolMax() int64 { return min(d.g.base-2*unit, 8<<20) }

// stripeOf is the stripe of key hash h.
func (d *disk) stripeOf(h uint64) *stripe { return d.stripes[h&uint64(len(d.stripes)-1)] }

// warn logs a disk error, at most once every 10 seconds per operation, and
// counts it.
func (d *disk) warn(op string, err error, args ...any) {
	d.counts.errors[op].Add(1)
	now := time.Now()
	if last, ok := d.logged.Load(op); ok && now.Sub(last.(time.Time)) < 10*time.Second {
		return
	}
	d.logged.Store(op, now)
	d.log.Error("disk tier error", append([]any{"op", op, "err", err}, args...)...)
}

// discarded counts and logs a bad record found.
func (d *disk) discarded(off int64, err error) {
	d.counts.discarded[reasonOf(err)].Add(1)
	d.log.Warn("discarding bad cache record", "offset", off, "reason", reasonOf(err), "err", err)
}

// f is the current data file.
func (d *disk) f() *dataFile { return d.file.Load() }

func (d *disk) close() {
	d.fds.close()
	d.f().f.Close()
	for _, f := range d.oldFile {
		f.f.Close()
	}
}

// dataFile is the data file with a fault hook for tests.
type dataFile struct {
	f *os.File
	// fault, when set, is asked before each write, sync and allocation
	// and fails it with the error it returns.
	fault func(op string) error
}

func (f *dataFile) check(op string) error {
	if f.fault != nil {
		return f.fault(op)
	}
	return nil
}

func (f *dataFile) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

func (f *dataFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check("write"); err != nil {
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

// Sync makes written data durable (fdatasync: the file's size and
// blocks, not its times).
func (f *dataFile) Sync() error {
	if err := f.check("sync"); err != nil {
		return err
	}
	return syscall.Fdatasync(int(f.f.Fd()))
}

// Allocate reserves n bytes at off, so later writes there do not run out
// of space.
func (f *dataFile) Allocate(off, n int64) error {
	if err := f.check("allocate"); err != nil {
		return err
	}
	err := syscall.Fallocate(int(f.f.Fd()), 0, off, n)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return nil // writes will extend the file instead
	}
	return err
}

// fdPool keeps read-only descriptors of the data file. A Body takes one
// for itself: sendfile reads at its descriptor's own offset, so two
// readers never share one. gen counts the data files: a descriptor of a
// file removed under the store is closed, never handed out again.
type fdPool struct {
	path string
	mu   sync.Mutex
	gen  int64
	free []*os.File
}

// get returns a descriptor and the data file generation it is of.
func (p *fdPool) get() (*os.File, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		f := p.free[n-1]
		p.free = p.free[:n-1]
		return f, p.gen, nil
	}
	f, err := os.Open(p.path)
	return f, p.gen, err
}

func (p *fdPool) put(f *os.File, gen int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen || len(p.free) >= 64 {
		f.Close()
		return
	}
	p.free = append(p.free, f)
}

// renew closes the idle descriptors and starts a new generation.
func (p *fdPool) renew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.free {
		f.Close()
	}
	p.free = nil
	p.gen++
}

func (p *fdPool) close() { p.renew() }

func (p *fdPool) generation() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// freeGuard keeps the file system's free space above min: below it the
// data file does not grow.
type freeGuard struct {
	dir    string
	min    int64
	log    *slog.Logger
	at     atomic.Int64 // when free was last measured (UnixNano)
	free   atomic.Int64
	paused atomic.Bool
}

// pausedFor reports whether growing the file by n bytes would leave less
// than min free; measured at most once a second.
func (g *freeGuard) pausedFor(n int64) bool {
	now := time.Now().UnixNano()
	if now-g.at.Load() > int64(time.Second) || g.paused.Load() {
		var st syscall.Statfs_t
		if err := syscall.Statfs(g.dir, &st); err == nil {
			g.free.Store(int64(st.Bavail) * int64(st.Bsize))
			g.at.Store(now)
		}
	}
	full := g.free.Load()-n < g.min
	if g.paused.Swap(full) != full {
		if full {
			g.log.Error("disk tier stopped growing: file system nearly full", "free_bytes", g.free.Load(), "min_free_bytes", g.min)
		} else {
			g.log.Info("disk tier may grow again", "free_bytes", g.free.Load())
		}
	}
	return full
}
