package store

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The store's benchmarks: make bench runs them. Each reports bytes/op so
// that go test prints throughput; compare the disk tier's figures with the
// memory tier's measured in the same run. Fill16KiB and DiskHit16KiB are
// the ones to hold against the file-per-object layout of earlier versions
// (the same benchmarks, run on that code).

func BenchmarkMemoryHit4KiB(b *testing.B) {
	s := openStore(b, b.TempDir())
	defer s.Close()
	put(b, s, meta("k"), body("k", 1, 4<<10), false)
	b.SetBytes(4 << 10)
	for b.Loop() {
		e, ok := s.Get("k")
		if !ok || !e.InMemory() {
			b.Fatal("not a memory hit")
		}
		io.Discard.Write(e.Body)
	}
}

func benchDiskHit(b *testing.B, size int) {
	// Nothing fits the memory tier: every Get goes to disk.
	s := openStore(b, b.TempDir(), diskOnly, func(c *Config) { c.MemoryMaxObject, c.DiskBytes = 1, 1<<30 })
	defer s.Close()
	keys := min(256, (256<<20)/size) // a quarter of the budget: all of them stay
	for i := range keys {
		put(b, s, meta("k"+strconv.Itoa(i)), body("k", i, size), false)
	}
	b.SetBytes(int64(size))
	i := 0
	for b.Loop() {
		e, ok := s.Get("k" + strconv.Itoa(i%keys))
		i++
		if !ok || e.InMemory() {
			b.Fatal("not a disk hit")
		}
		f, err := s.Open(e)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, io.LimitReader(f, e.Size))
		f.Close()
	}
}

func BenchmarkDiskHit4KiB(b *testing.B)  { benchDiskHit(b, 4<<10) }
func BenchmarkDiskHit16KiB(b *testing.B) { benchDiskHit(b, 16<<10) }
func BenchmarkDiskHit1MiB(b *testing.B)  { benchDiskHit(b, 1<<20) }

// benchFill measures fills in steady state: a 64 MiB budget already full,
// every fill a new version of one of twice as many keys as it holds, so
// that each one evicts.
func benchFill(b *testing.B, size int, compress bool, opts ...func(*Config)) {
	const budget = 64 << 20
	s := openStore(b, b.TempDir(), append([]func(*Config){diskOnly, func(c *Config) { c.DiskBytes = budget }}, opts...)...)
	defer s.Close()
	data := body("k", 1, size)
	keys := 2 * budget / size
	i := 0
	for ; i < keys; i++ { // a lap, so that the fills below reuse written space
		put(b, s, meta(fmt.Sprintf("k%d", i%keys)), data, compress)
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		put(b, s, meta(fmt.Sprintf("k%d", i%keys)), data, compress)
		i++
	}
}

func BenchmarkFill16KiB(b *testing.B) { benchFill(b, 16<<10, false) }

// BenchmarkFill16KiBSync is Fill16KiB with --disk-sync data: one
// fdatasync per flushed buffer, each put waiting for its own (a single
// filler, the worst case for group commit).
func BenchmarkFill16KiBSync(b *testing.B) {
	benchFill(b, 16<<10, false, func(c *Config) { c.Sync = true })
}
func BenchmarkFill64KiB(b *testing.B)          { benchFill(b, 64<<10, false) }
func BenchmarkFill1MiB(b *testing.B)           { benchFill(b, 1<<20, false) }
func BenchmarkFill1MiBCompressed(b *testing.B) { benchFill(b, 1<<20, true) }

// BenchmarkIndexBytesPerObject reports the index's memory per object
// (index-bytes/object), all of it counted: the table with its free slots.
func BenchmarkIndexBytesPerObject(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				var st stripe
				var used int64
				for i := range n {
					h := keyHash("https://example.com/objects/" + strconv.Itoa(i))
					st.tab.put(newSlot(identOf(h), 0, int64(i)*unit, 33*unit))
				}
				used = st.tab.bytes()
				b.ReportMetric(float64(used)/float64(st.tab.n), "index-bytes/object")
			}
		})
	}
}

func BenchmarkIndexRebuild100k(b *testing.B) { benchRebuild(b, 100_000) }

func benchRebuild(b *testing.B, objects int) {
	dir := b.TempDir()
	s := openStore(b, dir, diskOnly, func(c *Config) { c.DiskBytes = 1 << 30 })
	data := body("k", 1, 1<<10)
	for i := range objects {
		put(b, s, meta(fmt.Sprintf("https://example.com/objects/%d", i)), data, false)
	}
	s.Close()
	for b.Loop() {
		s := openStore(b, dir, diskOnly, func(c *Config) { c.DiskBytes = 1 << 30 })
		if got := s.Loaded(); got != int64(objects) {
			b.Fatalf("rebuilt %d of %d records", got, objects)
		}
		s.Close()
	}
	b.ReportMetric(float64(objects), "objects")
}

// BenchmarkRestart1M generates a data directory of 1,000,000 objects of
// 1 KiB (once, in SHARDCACHE_BENCH_DIR if set, so that runs can share it),
// then times a start until the first hit served from disk: from the
// checkpoint a clean stop wrote (clean), and from the segment headers
// alone, as after a crash before any checkpoint (rebuilt); each with the
// files in the page cache, and out of it (cold: dropped with
// posix_fadvise, as after a reboot).
//
// It writes about 1.5 GB: it runs only with SHARDCACHE_BENCH_RESTART=1.
func BenchmarkRestart1M(b *testing.B) {
	if os.Getenv("SHARDCACHE_BENCH_RESTART") == "" {
		b.Skip("writes a 1.5 GB data directory: set SHARDCACHE_BENCH_RESTART=1 to run it")
	}
	const objects = 1_000_000
	dir := os.Getenv("SHARDCACHE_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	cfg := func(c *Config) { c.DiskBytes, c.MemoryMaxObject = 4<<30, 1 }
	if _, err := os.Stat(filepath.Join(dir, "generated")); err != nil {
		s := openStore(b, dir, diskOnly, cfg)
		data := body("k", 1, 1<<10)
		for i := range objects {
			if err := s.Put(meta(fmt.Sprintf("https://example.com/objects/%d", i)), data); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
		os.WriteFile(filepath.Join(dir, "generated"), nil, 0o644)
	}
	ckpt, _ := os.ReadFile(filepath.Join(dir, ckptName))
	for _, mode := range []string{"clean", "rebuilt", "clean-cold", "rebuilt-cold"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				if strings.HasPrefix(mode, "rebuilt") {
					os.Remove(filepath.Join(dir, ckptName))
				} else {
					os.WriteFile(filepath.Join(dir, ckptName), ckpt, 0o644)
				}
				if strings.HasSuffix(mode, "cold") {
					for _, name := range []string{dataName, ckptName} {
						dropCache(b, filepath.Join(dir, name))
					}
				}
				start := time.Now()
				s := openStore(b, dir, diskOnly, cfg) // returns once Ready
				e, ok := s.Get("https://example.com/objects/123456")
				if !ok {
					b.Fatal("no hit after the restart")
				}
				f, err := s.Open(e)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, io.LimitReader(f, e.Size))
				f.Close()
				took := time.Since(start)
				if s.Loaded() != objects {
					b.Fatalf("loaded %d of %d", s.Loaded(), objects)
				}
				b.ReportMetric(took.Seconds(), "s-to-first-disk-hit")
				s.kill() // no checkpoint written: each run starts alike
			}
		})
	}
	os.WriteFile(filepath.Join(dir, ckptName), ckpt, 0o644)
}

// dropCache writes out and drops a file's pages from the page cache.
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		return // no checkpoint
	}
	defer f.Close()
	unix.Fdatasync(int(f.Fd()))
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}
