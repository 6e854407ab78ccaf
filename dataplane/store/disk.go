package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// evictionSamples is how many records eviction compares to pick the least
// recently used. Sampling (as Redis does) approximates LRU closely with 8 or
// more samples, without a list that every hit would have to lock to reorder.
const evictionSamples = 8

// ErrNoSpace is returned when the disk tier does not admit new objects:
// the file system is nearly full, or the object is larger than the budget.
// ErrNotAdmitted: the disk tier is full and the new object is asked for
// less often than the one it would evict (TinyLFU admission).
var ErrNotAdmitted = errors.New("store: disk tier full, and the object is asked for less often than what it would evict")

var ErrNoSpace = errors.New("store: disk tier not admitting: free space below the guard or object over budget")

// diskEntry is the index's record of one file.
type diskEntry struct {
	key  string
	size int64 // file bytes
	// access is the last use, for eviction; a record's mtime after restart.
	access atomic.Int64
	// verified is set once the body's checksum has been checked (or the
	// body was written by this process).
	verified atomic.Bool
	// meta caches the entry of an object too large for the memory tier.
	meta atomic.Pointer[Entry]
	slot int // position in disk.all; under disk.mu
}

// disk is the disk tier: one record file per object under dir/objects,
// named by a hash of the key, with an in-memory index rebuilt at start.
type disk struct {
	objects, tmp string
	budget       int64
	minFree      int64
	log          *slog.Logger
	onEvict      func(key string)

	mu    sync.RWMutex
	index map[string]*diskEntry
	all   []*diskEntry // for sampling
	used  int64
	// group names the group a key belongs to (a URL's Vary variants), if
	// any; groups holds each group's keys, kept with the index.
	group  func(key string) (string, bool)
	groups map[string]map[string]struct{}

	freeAt atomic.Int64 // when free was last measured (UnixNano)
	free   atomic.Int64
	paused atomic.Bool
	logged sync.Map // op → last log time, to keep error logs from flooding
	counts counters
	// freq estimates how often a key is asked for (TinyLFU admission); nil
	// admits everything.
	freq func(key string) uint32
	// admitted and evicted count records committed and evicted; rejected
	// the new records admission refused, being asked for less often than
	// what they would evict.
	admitted, evicted, rejected atomic.Uint64
	mkdirs                      [4096]atomic.Bool
	ready                       chan struct{}
	loaded                      atomic.Int64
	stop                        chan struct{}
	loading                     sync.WaitGroup
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
	for _, op := range []string{"create", "write", "commit", "read", "remove", "load", "mkdir"} {
		c.errors[op] = new(atomic.Uint64)
	}
	return c
}

func openDisk(dir string, budget, minFree int64, group func(string) (string, bool), log *slog.Logger) (*disk, error) {
	d := &disk{
		objects: filepath.Join(dir, "objects"),
		tmp:     filepath.Join(dir, "tmp"),
		budget:  budget,
		minFree: minFree,
		log:     log,
		onEvict: func(string) {},
		group:   group,
		groups:  map[string]map[string]struct{}{},
		index:   make(map[string]*diskEntry),
		counts:  newCounters(),
		ready:   make(chan struct{}),
		stop:    make(chan struct{}),
	}
	// Leftover temporary files are fills a crash interrupted: never objects.
	if err := os.RemoveAll(d.tmp); err != nil {
		return nil, fmt.Errorf("store: data directory %s is not usable: clearing leftover fills: %w", dir, err)
	}
	for _, p := range []string{d.objects, d.tmp} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("store: data directory %s is not usable: %w", dir, err)
		}
	}
	probe, err := os.CreateTemp(d.tmp, "probe-*")
	if err != nil {
		return nil, fmt.Errorf("store: data directory %s is not writable: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	d.loading.Add(1)
	go d.load()
	return d, nil
}

// name is the file name of key: a hash, never a path taken from a URL.
func name(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:16])
}

func (d *disk) path(key string) (dir, file string) {
	n := name(key)
	dir = filepath.Join(d.objects, n[:3])
	return dir, filepath.Join(dir, n)
}

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

// discard removes a bad record: logged, counted, never served.
func (d *disk) discard(path string, de *diskEntry, err error) {
	d.counts.discarded[reasonOf(err)].Add(1)
	d.log.Warn("discarding bad cache record", "file", path, "reason", reasonOf(err), "err", err)
	d.mu.Lock()
	d.forgetLocked(de)
	d.unlink(path)
	d.mu.Unlock()
}

// forgetLocked drops de from the index if it is still key's record.
func (d *disk) forgetLocked(de *diskEntry) {
	if de != nil && d.index[de.key] == de {
		d.removeLocked(de)
	}
}

// unlink removes a record file, counting failures other than its absence.
func (d *disk) unlink(path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.counts.errors["remove"].Add(1)
	}
}

// evictLocked removes least recently used records (sampled) until need
// more bytes fit the budget, and returns their keys.
func (d *disk) evictLocked(need int64) []string {
	var evicted []string
	for d.used+need > d.budget && len(d.all) > 0 {
		v := d.victimLocked()
		d.evictOneLocked(v)
		evicted = append(evicted, v.key)
	}
	return evicted
}

// evictOneLocked removes record v to make room.
func (d *disk) evictOneLocked(v *diskEntry) {
	d.removeLocked(v)
	d.evicted.Add(1)
	_, p := d.path(v.key)
	d.unlink(p)
}

// admit says whether an object of about size bytes (0 if unknown) may be
// written: the file system keeps minFree bytes free.
func (d *disk) admit(size int64) error {
	if size > d.budget {
		return ErrNoSpace
	}
	now := time.Now().UnixNano()
	if now-d.freeAt.Load() > int64(time.Second) || d.paused.Load() {
		var st syscall.Statfs_t
		if err := syscall.Statfs(d.tmp, &st); err == nil {
			d.free.Store(int64(st.Bavail) * int64(st.Bsize))
			d.freeAt.Store(now)
		}
	}
	full := d.free.Load()-size < d.minFree
	if d.paused.Swap(full) != full {
		if full {
			d.log.Error("disk tier stopped admitting objects: file system nearly full", "free_bytes", d.free.Load(), "min_free_bytes", d.minFree)
		} else {
			d.log.Info("disk tier admitting objects again", "free_bytes", d.free.Load())
		}
	}
	if full {
		return ErrNoSpace
	}
	return nil
}

func (d *disk) lookup(key string) *diskEntry {
	d.mu.RLock()
	de := d.index[key]
	d.mu.RUnlock()
	return de
}

// commit moves a complete record into place as key's object, evicting
// others to stay within the budget.
func (d *disk) commit(tmp, key string, size int64) (*diskEntry, error) {
	if size > d.budget {
		os.Remove(tmp)
		return nil, ErrNoSpace
	}
	dir, final := d.path(key)
	slot := &d.mkdirs[dirIndex(filepath.Base(dir))]
	if !slot.Load() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			os.Remove(tmp)
			return nil, err
		}
		slot.Store(true)
	}
	de := &diskEntry{key: key, size: size}
	de.access.Store(clock())
	de.verified.Store(true)
	d.mu.Lock()
	old := d.index[key]
	if old != nil {
		d.removeLocked(old) // the rename replaces its file
	}
	// A record that replaces one of its key's is not a newcomer: it is
	// never refused admission.
	victims, ok := d.victimsLocked(key, size, old == nil)
	if !ok {
		d.mu.Unlock()
		d.rejected.Add(1)
		os.Remove(tmp)
		return nil, ErrNotAdmitted
	}
	var evicted []string
	for _, v := range victims {
		d.evictOneLocked(v)
		evicted = append(evicted, v.key)
	}
	err := os.Rename(tmp, final)
	if err == nil {
		d.addLocked(de)
		d.admitted.Add(1)
	}
	d.mu.Unlock()
	if old != nil {
		// The memory tier may hold the replaced version: drop it before
		// the new one is offered, so no Get finds the old one after this.
		evicted = append(evicted, key)
	}
	for _, k := range evicted {
		d.onEvict(k)
	}
	if errors.Is(err, fs.ErrNotExist) && d.recreate() {
		// The directory went away under the node: make it again and
		// store the record rather than drop it.
		if err = os.MkdirAll(dir, 0o755); err == nil {
			d.mu.Lock()
			if err = os.Rename(tmp, final); err == nil {
				d.addLocked(de)
				d.admitted.Add(1)
			}
			d.mu.Unlock()
		}
	}
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	return de, nil
}

// recreate makes the tier's directories again after they were deleted
// under a running node (by an operator, a cleanup job): records it had
// are found missing when read, and discarded then. It reports whether the
// directories exist now.
func (d *disk) recreate() bool {
	if _, err := os.Stat(d.tmp); err == nil {
		return true // only a record's directory was missing
	}
	for i := range d.mkdirs {
		d.mkdirs[i].Store(false)
	}
	for _, p := range []string{d.objects, d.tmp} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			d.warn("mkdir", err)
			return false
		}
	}
	d.log.Error("disk tier directory was missing; made it again (what it held is lost)", "dir", filepath.Dir(d.tmp))
	return true
}

func dirIndex(hex3 string) int {
	var n int
	for _, c := range hex3 {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c-'a') + 10
		}
	}
	return n & 4095
}

// victimsLocked picks the records a new record of size bytes under key
// evicts (sampled least recently used), and, when admit is set, applies
// TinyLFU's admission (Einziger et al.): it reports false, having evicted
// nothing, when key is
// asked for less often than one of them. So a scan of objects asked for
// once passes through a full tier without evicting what its clients keep
// asking for, while a key asked for as often as the old ones replaces them
// as LRU would.
func (d *disk) victimsLocked(key string, size int64, admit bool) ([]*diskEntry, bool) {
	var victims []*diskEntry
	var freed int64
	var want uint32
	check := admit && d.freq != nil
	if check {
		want = d.freq(key)
	}
	for tries := 0; d.used-freed+size > d.budget && len(victims) < len(d.all); tries++ {
		v := d.victimLocked()
		if slices.Contains(victims, v) {
			if tries < 4*len(d.all) {
				continue
			}
			// Sampling keeps finding chosen ones: take the next unchosen.
			v = d.all[slices.IndexFunc(d.all, func(e *diskEntry) bool { return !slices.Contains(victims, e) })]
		}
		if check && want < d.freq(v.key) {
			return nil, false
		}
		victims = append(victims, v)
		freed += v.size
	}
	return victims, true
}

// victimLocked samples records and returns the least recently used.
func (d *disk) victimLocked() *diskEntry {
	var v *diskEntry
	for range min(evictionSamples, len(d.all)) {
		c := d.all[rand.IntN(len(d.all))]
		if v == nil || c.access.Load() < v.access.Load() {
			v = c
		}
	}
	return v
}

func (d *disk) addLocked(de *diskEntry) {
	de.slot = len(d.all)
	d.all = append(d.all, de)
	d.index[de.key] = de
	d.used += de.size
	d.joinGroupLocked(de.key)
}

func (d *disk) removeLocked(de *diskEntry) {
	last := d.all[len(d.all)-1]
	d.all[de.slot] = last
	last.slot = de.slot
	d.all = d.all[:len(d.all)-1]
	delete(d.index, de.key)
	d.used -= de.size
	d.leaveGroupLocked(de.key)
}

// remove deletes key's record.
func (d *disk) remove(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	de := d.index[key]
	if de == nil {
		return false
	}
	d.removeLocked(de)
	_, p := d.path(key)
	d.unlink(p)
	return true
}

// keys calls fn for every key held, until fn returns false.
func (d *disk) keys(fn func(string) bool) {
	d.mu.RLock()
	ks := make([]string, 0, len(d.index))
	for k := range d.index {
		ks = append(ks, k)
	}
	d.mu.RUnlock()
	for _, k := range ks {
		if !fn(k) {
			return
		}
	}
}

func (d *disk) stats() (bytes, objects int64) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.used, int64(len(d.all))
}

// load rebuilds the index from the record files, reading each one's head
// and footer (not its body: a body is checked when first read). Bad records
// are discarded.
func (d *disk) load() {
	defer d.loading.Done()
	defer close(d.ready)
	start := time.Now()
	dirs, err := os.ReadDir(d.objects)
	if err != nil {
		d.warn("load", err)
		return
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range max(4, 2*runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for sub := range work {
				d.loadDir(sub)
			}
		})
	}
	for _, de := range dirs {
		if !de.IsDir() {
			continue
		}
		d.mkdirs[dirIndex(de.Name())].Store(len(de.Name()) == 3)
		select {
		case work <- filepath.Join(d.objects, de.Name()):
		case <-d.stop:
		}
	}
	close(work)
	wg.Wait()
	// The budget may have shrunk since the records were written.
	d.mu.Lock()
	evicted := d.evictLocked(0)
	d.mu.Unlock()
	bytes, objects := d.stats()
	d.log.Info("disk tier index loaded", "objects", objects, "bytes", bytes, "evicted_over_budget", len(evicted),
		"took", time.Since(start).Round(time.Millisecond))
}

func (d *disk) loadDir(dir string) {
	names, err := os.ReadDir(dir)
	if err != nil {
		d.warn("load", err, "dir", dir)
		return
	}
	buf := make([]byte, 4096)
	for _, n := range names {
		select {
		case <-d.stop:
			return
		default:
		}
		p := filepath.Join(dir, n.Name())
		key, size, mtime, err := scanRecord(p, n.Name(), buf)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			d.discard(p, nil, err)
			continue
		}
		de := &diskEntry{key: key, size: size}
		de.access.Store(mtime)
		d.mu.Lock()
		if d.index[key] == nil { // a fill since start is newer
			d.addLocked(de)
		}
		d.mu.Unlock()
		d.loaded.Add(1)
	}
}

// scanRecord checks a record's head and footer and returns its key, size
// and modification time.
func scanRecord(path, fileName string, buf []byte) (key string, size, mtime int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, 0, err
	}
	e, err := readHead(f, buf)
	if err != nil {
		return "", 0, 0, err
	}
	if name(e.Key) != fileName {
		return "", 0, 0, badRecord(badKey, "record holds key %q, which is not stored under this name", e.Key)
	}
	if _, err := readFooter(f, e.off, st.Size()); err != nil {
		return "", 0, 0, err
	}
	return e.Key, st.Size(), st.ModTime().UnixNano(), nil
}

// readHead reads and parses a record's head; the entry's off is the body's
// offset.
func readHead(f *os.File, buf []byte) (*Entry, error) {
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	hl, err := headLen(buf[:n])
	if err != nil {
		return nil, err
	}
	head := buf[:min(n, hl)]
	if hl > n {
		head = make([]byte, hl)
		if _, err := f.ReadAt(head, 0); err != nil {
			return nil, badRecord(badLength, "head cut short: %v", err)
		}
	}
	e, err := decodeHead(head)
	if err != nil {
		return nil, err
	}
	e.off = int64(hl)
	return e, nil
}

func readFooter(f *os.File, bodyOff, fileSize int64) (footer, error) {
	var b [footerLen]byte
	if fileSize < bodyOff+footerLen {
		return footer{}, badRecord(badLength, "file of %d bytes ends before its footer", fileSize)
	}
	if _, err := f.ReadAt(b[:], fileSize-footerLen); err != nil {
		return footer{}, err
	}
	return decodeFooter(b[:], bodyOff, fileSize)
}
