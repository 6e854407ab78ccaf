package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// diskOnly puts every object straight on disk (no probation).
func diskOnly(c *Config) { c.ProbationBytes = -1 }

// recordOf returns where key's record lies in the data file.
func recordOf(t testing.TB, s *Store, key string) (off, n int64) {
	t.Helper()
	h := keyHash(key)
	v, seg, ok := s.disk.stripeOf(h).lookup(h, false)
	if !ok {
		t.Fatalf("%s is not indexed", key)
	}
	seg.unpin()
	return int64(v.off) * unit, int64(v.n) * unit
}

// kill stops s as a SIGKILL would, after the write buffers reached the
// kernel: no checkpoint, nothing on probation written.
func (s *Store) kill() {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.disk.flushAll(true)
		s.disk.close()
		s.mem.Close()
	})
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, off)
	b[0] ^= 0xff
	f.WriteAt(b, off)
}

// A flipped byte inside a stored record, in its body or its metadata,
// makes that object a miss, counted, never an answer; fetched again, it
// is stored and served anew. The other objects are untouched.
func TestFlippedByteMakesTheObjectAMiss(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, diskOnly)
	sizes := map[string]int{"small": 2000, "large": 200 << 10, "meta": 2000, "good": 2000}
	for k, n := range sizes {
		put(t, s, meta(k), body(k, 1, n), false)
	}
	flip := map[string]int64{}
	for k, at := range map[string]int64{"small": 1500, "large": 100 << 10, "meta": 10} {
		off, _ := recordOf(t, s, k)
		flip[k] = off + prefixLen + at // small and large: in the body; meta: in the metadata
	}
	s.Close()
	for _, off := range flip {
		flipByte(t, filepath.Join(dir, dataName), off)
	}
	s = openStore(t, dir, diskOnly)
	defer s.Close()
	for k := range flip {
		if b, _, ok := read(t, s, k); ok {
			t.Fatalf("%s with a flipped byte served %d bytes", k, len(b))
		}
	}
	if got := s.Stats().Discarded[badChecksum]; got != 3 {
		t.Fatalf("%d records discarded for their checksum, want 3", got)
	}
	if b, _, ok := read(t, s, "good"); !ok || !bytes.Equal(b, body("good", 1, 2000)) {
		t.Fatal("the good record is not served")
	}
	put(t, s, meta("large"), body("large", 2, 200<<10), false) // fetched again
	if b, _, ok := read(t, s, "large"); !ok || !bytes.Equal(b, body("large", 2, 200<<10)) {
		t.Fatal("an object fetched again after its record was found bad is not served")
	}
}

// A data file cut short loses the objects whose records it no longer
// holds, and only those: with the checkpoint, and rebuilt without it.
func TestTruncatedDataFileLosesOnlyWhatItNoLongerHolds(t *testing.T) {
	for _, checkpoint := range []bool{true, false} {
		t.Run(fmt.Sprintf("checkpoint=%t", checkpoint), func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, diskOnly)
			ends := map[string]int64{}
			var all []int64
			for i := range 200 {
				k := fmt.Sprintf("k%d", i)
				put(t, s, meta(k), body(k, 1, 20<<10), false)
			}
			for i := range 200 {
				k := fmt.Sprintf("k%d", i)
				off, n := recordOf(t, s, k)
				ends[k] = off + n
				all = append(all, off+n)
			}
			s.Close()
			cut := all[len(all)/2] - 1000 // inside a record
			if err := os.Truncate(filepath.Join(dir, dataName), cut); err != nil {
				t.Fatal(err)
			}
			if !checkpoint {
				os.Remove(filepath.Join(dir, ckptName))
			}
			s = openStore(t, dir, diskOnly)
			defer s.Close()
			kept, lost := 0, 0
			for k, end := range ends {
				b, _, ok := read(t, s, k)
				switch {
				case end <= cut && (!ok || !bytes.Equal(b, body(k, 1, 20<<10))):
					t.Fatalf("%s, whose record ends at %d before the cut at %d, is lost or wrong (served %v)", k, end, cut, ok)
				case end > cut && ok:
					t.Fatalf("%s, whose record the cut at %d took, served %d bytes", k, cut, len(b))
				case ok:
					kept++
				default:
					lost++
				}
			}
			if kept == 0 || lost == 0 {
				t.Fatalf("%d kept, %d lost: the cut does not test both", kept, lost)
			}
		})
	}
}

// A reclaim racing with readers of the same segment never gives a reader
// another object's bytes: many readers, small objects, a tiny budget that
// fills objects reclaim every few puts; every body is read from disk.
func TestReclaimRacingReadersNeverYieldsAnotherObjectsBytes(t *testing.T) {
	s := openStore(t, t.TempDir(), func(c *Config) {
		c.DiskBytes, c.MemoryMaxObject, c.ProbationBytes, c.AdmissionPeriod = 256<<10, 1, -1, -1
	})
	defer s.Close()
	const keys = 40
	var reads, gone atomic.Int64
	var failed atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				k := fmt.Sprintf("k%d", rand.IntN(keys))
				e, ok := s.Get(k)
				if !ok {
					continue
				}
				f, err := s.Open(e)
				if err != nil {
					gone.Add(1)
					continue
				}
				b, err := io.ReadAll(io.LimitReader(f, e.Size))
				f.Close()
				gen, _ := strconv.Atoi(e.Header.Get("X-Gen"))
				size, _ := strconv.Atoi(e.Header.Get("X-Size"))
				if err != nil || e.Key != k || !bytes.Equal(b, body(k, gen, size)) {
					failed.CompareAndSwap(nil, fmt.Sprintf("%s (generation %d): %d bytes, %v, not its body", k, gen, len(b), err))
				}
				reads.Add(1)
			}
		})
	}
	for gen := range 3000 {
		k := fmt.Sprintf("k%d", gen%keys)
		size := 3<<10 + rand.IntN(12<<10)
		e := meta(k)
		e.Header.Set("X-Gen", strconv.Itoa(gen))
		e.Header.Set("X-Size", strconv.Itoa(size))
		offer(t, s, e, body(k, gen, size), false)
	}
	close(done)
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	st := s.Stats()
	if reads.Load() < 100 || st.Evicted["disk"] < 100 {
		t.Fatalf("%d reads, %d evictions: the race was not run", reads.Load(), st.Evicted["disk"])
	}
	t.Logf("%d reads intact, %d found gone at Open, %d evictions", reads.Load(), gone.Load(), st.Evicted["disk"])
}

// A disk that fills (or fails) mid-fill: the readers of that fill still
// get the whole body, the stripe stops writing and says so, and the store
// keeps serving what it holds.
func TestDiskFullMidFillKeepsTheAnswerWhole(t *testing.T) {
	for _, size := range []int{100 << 10, 3 << 20} { // in memory until the commit; written in place as it streams
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			var full atomic.Bool
			s := openStore(t, t.TempDir(), diskOnly, func(c *Config) {
				c.fault = func(op string) error {
					if full.Load() && op != "sync" {
						return syscall.ENOSPC
					}
					return nil
				}
			})
			defer s.Close()
			put(t, s, meta("before"), body("before", 1, 5000), false)
			s.disk.flushAll(true)
			for i := range 20 { // other keys, some in the same stripe
				put(t, s, meta(fmt.Sprintf("o%d", i)), body("o", i, 3000), false)
			}
			w, err := s.Create(meta("filling"), int64(size), false, 1<<40)
			if err != nil {
				t.Fatal(err)
			}
			r := mustReader(t, w)
			got := make(chan []byte)
			go func() {
				b, _ := io.ReadAll(r)
				r.Close()
				got <- b
			}()
			want := body("filling", 1, size)
			for i, c := range slicesChunk(want, 64<<10) {
				if i == len(want)/(64<<10)/2 {
					full.Store(true) // the disk fills halfway through
				}
				if _, err := w.Write(c); err != nil {
					t.Fatalf("Write after the disk filled: %v", err)
				}
			}
			w.Commit()
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("the reader got %d bytes, want the whole %d", len(b), size)
			}
			s.disk.flushAll(true) // the buffered puts meet the full disk too
			st := s.Stats()
			if len(st.Stopped) == 0 || !strings.Contains(st.Stopped[0], "no space") {
				t.Fatalf("no stripe says it stopped: %v", st.Stopped)
			}
			if b, _, ok := read(t, s, "before"); !ok || !bytes.Equal(b, body("before", 1, 5000)) {
				t.Fatal("an object stored before the disk filled is not served")
			}
			// New fills of a stopped stripe are served, not stored.
			for i := range 20 {
				k := fmt.Sprintf("after%d", i)
				if w, err := s.Create(meta(k), 100, false, 1<<40); err == nil {
					w.Write(make([]byte, 100))
					w.Commit()
				} else if !errors.Is(err, ErrNoSpace) {
					t.Fatalf("Create on a full disk: %v, want ErrNoSpace", err)
				}
			}
		})
	}
}

// The same on a real file system that fills: a small tmpfs, mounted by
// the test where it runs as root (CI does).
func TestTmpfsFullMidFillKeepsTheAnswerWhole(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root; TestDiskFullMidFillKeepsTheAnswerWhole injects the same error")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=3m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	s := openStore(t, dir, diskOnly) // a 64 MiB budget on 3 MiB
	defer s.Close()
	stored := 0
	for i := range 40 {
		k := fmt.Sprintf("k%d", i)
		want := body(k, 1, 200<<10)
		w, err := s.Create(meta(k), -1, false, 1<<40)
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Create on a full tmpfs: %v", err)
			}
			continue
		}
		r := mustReader(t, w)
		for _, c := range slicesChunk(want, 32<<10) {
			w.Write(c)
		}
		if ok, _ := w.Commit(); ok {
			stored++
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s on a full tmpfs: the reader got %d bytes, %v; want the whole body", k, len(b), err)
		}
	}
	s.disk.flushAll(true)
	st := s.Stats()
	if stored == 0 || len(st.Stopped) == 0 {
		t.Fatalf("%d stored, stripes stopped: %v; want some stored, then the disk full", stored, st.Stopped)
	}
	t.Logf("%d of 40 fills stored before the tmpfs filled; %v", stored, st.Stopped)
}

func slicesChunk(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

// What was checkpointed survives a kill, and so does what was written
// after the checkpoint (its tail is replayed), deletes included.
func TestCheckpointAndTailReplay(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, diskOnly)
	for i := range 50 {
		put(t, s, meta(fmt.Sprintf("a%d", i)), body("a", i, 5000), false)
	}
	if err := s.disk.checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		put(t, s, meta(fmt.Sprintf("b%d", i)), body("b", i, 5000), false)
	}
	s.Delete("a7")
	put(t, s, meta("a8"), body("a", 1000, 5000), false) // replaced after the checkpoint
	s.kill()
	s = openStore(t, dir, diskOnly)
	defer s.Close()
	for i := range 50 {
		for _, p := range []string{"a", "b"} {
			k := fmt.Sprintf("%s%d", p, i)
			gen := i
			if k == "a8" {
				gen = 1000
			}
			b, _, ok := read(t, s, k)
			if k == "a7" {
				if ok {
					t.Fatal("an object deleted after the checkpoint came back")
				}
				continue
			}
			if !ok || !bytes.Equal(b, body(p, gen, 5000)) {
				t.Fatalf("%s after the kill: served %v, right body %v", k, ok, bytes.Equal(b, body(p, gen, 5000)))
			}
		}
	}
}

// logged collects what a store logs.
type logged struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logged) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logged) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A data directory of the old file-per-object layout is discarded, with a
// log line saying so; the store then works on the same directory. A data
// file laid out for another budget is discarded the same way.
func TestOldLayoutAndOtherBudgetAreDiscarded(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"objects/abc/abcdef0123", "objects/abd/abd0000000", "tmp/fill-1"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte("SHCR an old record"), 0o644)
	}
	var log logged
	withLog := func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) }
	s := openStore(t, dir, diskOnly, withLog)
	if !strings.Contains(log.String(), "old file-per-object layout; discarding it") {
		t.Fatalf("no log line about the old layout: %s", log.String())
	}
	put(t, s, meta("k"), body("k", 1, 1000), false)
	if _, _, ok := read(t, s, "k"); !ok {
		t.Fatal("the store does not serve on a directory that had the old layout")
	}
	gone := func(p string) bool {
		_, err := os.Stat(filepath.Join(dir, p))
		return errors.Is(err, os.ErrNotExist)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if gone("objects.discarded") && gone("tmp") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old layout's files are not removed")
		}
	}
	s.Close()
	for _, p := range []string{"objects", "objects.discarded", "tmp"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s of the old layout is still there after the store stopped", p)
		}
	}
	s = openStore(t, dir, diskOnly, withLog, func(c *Config) { c.DiskBytes = 32 << 20 })
	defer s.Close()
	if !strings.Contains(log.String(), "laid out for another disk budget") || s.Stats().DiskObjects != 0 {
		t.Fatalf("a data file of another budget: %d objects, log %s", s.Stats().DiskObjects, log.String())
	}
	put(t, s, meta("k2"), body("k2", 1, 1000), false)
	if _, _, ok := read(t, s, "k2"); !ok {
		t.Fatal("the store does not serve after discarding a data file of another budget")
	}
}

// The index holds at most 64 bytes per object, all included.
func TestIndexBytesPerObject(t *testing.T) {
	s := openStore(t, t.TempDir(), diskOnly, func(c *Config) { c.DiskBytes = 256 << 20 })
	defer s.Close()
	for i := range 20000 {
		k := fmt.Sprintf("https://example.com/objects/%d", i)
		put(t, s, meta(k), body(k, 1, 500), false)
	}
	st := s.Stats()
	if per := float64(st.IndexBytes) / float64(st.DiskObjects); st.DiskObjects != 20000 || per > 64 {
		t.Fatalf("%d objects indexed in %d bytes: %.1f bytes each, want at most 64", st.DiskObjects, st.IndexBytes, per)
	}
}

// A store closed while its index still loads saves no partial index: the
// next start finds every object.
func TestCloseWhileLoadingLosesNothing(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, diskOnly)
	for i := range 2000 {
		put(t, s, meta(fmt.Sprintf("k%d", i)), body("k", i, 2000), false)
	}
	s.Close()
	os.Remove(filepath.Join(dir, ckptName)) // a rebuild from the segments: the longest load
	cfg := Config{Dir: dir, DiskBytes: 64 << 20, MemoryBytes: 8 << 20, MemoryMaxObject: 64 << 10, ProbationBytes: -1,
		Logger: slog.New(slog.DiscardHandler)}
	early, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	early.Close() // most likely before the load is done
	s = openStore(t, dir, diskOnly)
	defer s.Close()
	if got := s.Stats().DiskObjects; got != 2000 {
		t.Fatalf("%d objects after a store was closed while loading, want 2000", got)
	}
}
