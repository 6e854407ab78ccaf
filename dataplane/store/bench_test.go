package store

import (
	"fmt"
	"io"
	"testing"
)

// The store's benchmarks: make bench runs them. Each reports bytes/op so
// that go test prints throughput; compare the disk tier's figures with the
// memory tier's measured in the same run.

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
	s := openStore(b, b.TempDir(), func(c *Config) { c.MemoryMaxObject = 1 })
	defer s.Close()
	put(b, s, meta("k"), body("k", 1, size), false)
	b.SetBytes(int64(size))
	for b.Loop() {
		e, ok := s.Get("k")
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

func BenchmarkDiskHit4KiB(b *testing.B) { benchDiskHit(b, 4<<10) }
func BenchmarkDiskHit1MiB(b *testing.B) { benchDiskHit(b, 1<<20) }

func benchFill(b *testing.B, size int, compress bool) {
	s := openStore(b, b.TempDir(), func(c *Config) { c.DiskBytes = 1 << 30 })
	defer s.Close()
	data := body("k", 1, size)
	b.SetBytes(int64(size))
	i := 0
	for b.Loop() {
		put(b, s, meta(fmt.Sprintf("k%d", i%512)), data, compress)
		i++
	}
}

func BenchmarkFill64KiB(b *testing.B)          { benchFill(b, 64<<10, false) }
func BenchmarkFill1MiB(b *testing.B)           { benchFill(b, 1<<20, false) }
func BenchmarkFill1MiBCompressed(b *testing.B) { benchFill(b, 1<<20, true) }
func BenchmarkIndexRebuild100k(b *testing.B)   { benchRebuild(b, 100_000) }
func benchRebuild(b *testing.B, objects int) {
	dir := b.TempDir()
	s := openStore(b, dir, func(c *Config) { c.DiskBytes = 1 << 30 })
	data := body("k", 1, 1<<10)
	for i := range objects {
		put(b, s, meta(fmt.Sprintf("https://example.com/objects/%d", i)), data, false)
	}
	s.Close()
	for b.Loop() {
		s := openStore(b, dir, func(c *Config) { c.DiskBytes = 1 << 30 })
		if got := s.Loaded(); got != int64(objects) {
			b.Fatalf("rebuilt %d of %d records", got, objects)
		}
		s.Close()
	}
	b.ReportMetric(float64(objects), "objects")
}
