package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

func openStore(t testing.TB, dir string, mut ...func(*Config)) *Store {
	t.Helper()
	cfg := Config{Dir: dir, DiskBytes: 64 << 20, MemoryBytes: 8 << 20, MemoryMaxObject: 64 << 10,
		Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mut {
		m(&cfg)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-s.Ready()
	return s
}

// body is the deterministic body of key at generation gen.
func body(key string, gen, size int) []byte {
	b := make([]byte, size)
	seed := fmt.Sprintf("%s/%d/", key, gen)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i/len(seed))
	}
	return b
}

func meta(key string) *Entry {
	return &Entry{Key: key, Status: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}},
		Received: time.Now(), Lifetime: time.Hour}
}

// put stores b under key in chunks, as a fill would.
func put(t testing.TB, s *Store, e *Entry, b []byte, compress bool) {
	t.Helper()
	if !offer(t, s, e, b, compress) {
		t.Fatal("Commit = false")
	}
}

// offer is put that reports whether the store kept the object.
func offer(t testing.TB, s *Store, e *Entry, b []byte, compress bool) bool {
	t.Helper()
	w, err := s.Create(e, int64(len(b)), compress, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	for c := range slices.Chunk(b, 32<<10) {
		if _, err := w.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	ok, err := w.Commit()
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return ok
}

// read returns the identity body of key, or ok false.
func read(t testing.TB, s *Store, key string) (b []byte, e *Entry, ok bool) {
	t.Helper()
	e, ok = s.Get(key)
	if !ok {
		return nil, nil, false
	}
	var r io.Reader = bytes.NewReader(e.Body)
	if !e.InMemory() {
		f, err := s.Open(e)
		if err != nil {
			return nil, nil, false
		}
		defer f.Close()
		r = io.LimitReader(f, e.Size)
	}
	if e.Coding == Coding {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		r = d
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return b, e, true
}

func TestStoreSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	small, large := body("small", 1, 1000), body("large", 1, 300<<10)
	put(t, s, meta("small"), small, false)
	put(t, s, meta("large"), large, false)
	s.mem.c.Wait() // the memory tier admits asynchronously
	if e, ok := s.Get("small"); !ok || !e.InMemory() || !bytes.Equal(e.Body, small) {
		t.Fatal("a small object is not served from memory after its fill")
	}
	if b, e, ok := read(t, s, "large"); !ok || e.InMemory() || !bytes.Equal(b, large) {
		t.Fatal("a large object is not served from disk after its fill")
	}
	s.Close()

	s = openStore(t, dir)
	defer s.Close()
	if got := s.Loaded(); got != 2 {
		t.Fatalf("index rebuilt with %d records, want 2", got)
	}
	for key, want := range map[string][]byte{"small": small, "large": large} {
		b, e, ok := read(t, s, key)
		if !ok || !bytes.Equal(b, want) {
			t.Fatalf("%s after reopen: ok=%v, body equal=%v", key, ok, bytes.Equal(b, want))
		}
		if e.Status != 200 || e.Header.Get("Content-Type") != "application/octet-stream" || e.Lifetime != time.Hour {
			t.Fatalf("%s metadata after reopen: %+v", key, e)
		}
	}
	s.mem.c.Wait()
	if e, ok := s.mem.Get("small"); !ok || !bytes.Equal(e.Body, small) {
		t.Fatal("a small object read from disk was not promoted to memory")
	}
}

func TestReadersFollowTheFill(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	want := body("k", 1, 200<<10)
	w, err := s.Create(meta("k"), -1, false, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	readers := make([]io.ReadCloser, 3)
	got := make([][]byte, 3)
	errs := make(chan error, 3)
	for i := range readers {
		readers[i] = mustReader(t, w)
		go func() {
			defer readers[i].Close()
			var err error
			got[i], err = io.ReadAll(readers[i])
			errs <- err
		}()
	}
	if _, ok := s.Get("k"); ok {
		t.Fatal("an object is visible before its fill completes")
	}
	for c := range slices.Chunk(want, 1000) {
		w.Write(c)
	}
	if ok, err := w.Commit(); !ok || err != nil {
		t.Fatalf("Commit = %v, %v", ok, err)
	}
	for i := range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		_ = i
	}
	for i, b := range got {
		if !bytes.Equal(b, want) {
			t.Fatalf("reader %d got %d bytes, want the %d written", i, len(b), len(want))
		}
	}
}

func TestAbortedFillLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	defer s.Close()
	w, err := s.Create(meta("k"), 10000, false, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	r := mustReader(t, w)
	defer r.Close()
	w.Write(make([]byte, 5000))
	w.Abort(errors.New("origin reset the connection"))
	if _, err := io.ReadAll(r); !errors.Is(err, ErrAborted) {
		t.Fatalf("a reader of an aborted fill got %v, want ErrAborted", err)
	}
	if _, ok := s.Get("k"); ok {
		t.Fatal("an aborted fill is visible")
	}
	if st := s.Stats(); st.DiskObjects != 0 || st.ProbationObjects != 0 {
		t.Fatalf("an aborted fill left %d objects on disk, %d on probation", st.DiskObjects, st.ProbationObjects)
	}
}

func TestOversizeObjectIsStreamedNotStored(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	w, err := s.Create(meta("k"), -1, false, 1000)
	if err != nil {
		t.Fatal(err)
	}
	r := mustReader(t, w)
	defer r.Close()
	w.Write(make([]byte, 3000))
	if ok, err := w.Commit(); ok || err != nil {
		t.Fatalf("Commit of a body over the maximum = %v, %v; want not stored, no error", ok, err)
	}
	if b, err := io.ReadAll(r); err != nil || len(b) != 3000 {
		t.Fatalf("its reader got %d bytes, %v; want all 3000", len(b), err)
	}
	if _, ok := s.Get("k"); ok {
		t.Fatal("an object over the maximum was stored")
	}
}

func TestCompressedObjectRoundTrips(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	text := []byte(strings.Repeat(`{"id": 12345, "name": "shardcache", "tags": ["a", "b"]}`+"\n", 4000))
	e := meta("json")
	e.Header.Set("Content-Type", "application/json")
	put(t, s, e, text, true)
	got, ge, ok := read(t, s, "json")
	if !ok || !bytes.Equal(got, text) {
		t.Fatal("a compressed object does not decode to what was written")
	}
	if ge.Coding != Coding || ge.Size >= ge.Length/4 || ge.Length != int64(len(text)) {
		t.Fatalf("stored %d bytes coded %q of %d; want zstd, well under a quarter", ge.Size, ge.Coding, ge.Length)
	}
	s.Close()
	s = openStore(t, dir)
	defer s.Close()
	if got, ge, ok := read(t, s, "json"); !ok || !bytes.Equal(got, text) || ge.Coding != Coding || ge.Length != int64(len(text)) {
		t.Fatal("a compressed object does not survive a reopen")
	}
}

func TestDiskBudgetHolds(t *testing.T) {
	const budget = 256 << 10
	dir := t.TempDir()
	// No admission: every object is stored, so the budget holds while the
	// tier turns over (the admission would refuse these objects once the
	// tier is full: none is asked for more often than another).
	s := openStore(t, dir, func(c *Config) { c.DiskBytes, c.ProbationBytes, c.AdmissionPeriod = budget, -1, -1 })
	defer s.Close()
	for i := range 300 { // about 3 MiB through a 256 KiB budget
		put(t, s, meta(fmt.Sprintf("k%d", i)), body("k", i, 10<<10), false)
		if used := dirBytes(t, dir); used > budget+64<<10 {
			t.Fatalf("after %d objects the data directory takes %d bytes, budget %d", i+1, used, budget)
		}
	}
	st := s.Stats()
	if st.DiskBytes > budget || st.DiskObjects < 15 {
		t.Fatalf("disk tier holds %d bytes in %d objects; want at most %d bytes, and most of the budget used", st.DiskBytes, st.DiskObjects, budget)
	}
	if st.MemoryBytes > 8<<20 {
		t.Fatalf("memory tier holds %d bytes over its budget", st.MemoryBytes)
	}
	// The most recent objects are kept, the oldest evicted.
	if _, ok := s.Get("k299"); !ok {
		t.Fatal("the newest object was evicted")
	}
	if _, ok := s.Get("k0"); ok {
		t.Fatal("the oldest object survived 3 MiB of newer ones in a 256 KiB budget")
	}
}

func TestMemoryBudgetHoldsUnderFills(t *testing.T) {
	const budget = 1 << 20
	s := openStore(t, t.TempDir(), func(c *Config) { c.MemoryBytes = budget })
	defer s.Close()
	for i := range 400 { // about 4 MiB of small objects
		put(t, s, meta(fmt.Sprintf("k%d", i)), body("k", i, 10<<10), false)
		s.mem.c.Wait()
		if b, _ := s.mem.Stats(); b > budget {
			t.Fatalf("memory tier holds %d bytes, budget %d", b, budget)
		}
	}
}

func dirBytes(t testing.TB, dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func TestFreeSpaceGuardStopsAdmission(t *testing.T) {
	s := openStore(t, t.TempDir(), func(c *Config) { c.MinFreeBytes = 1 << 62 })
	defer s.Close()
	if _, err := s.Create(meta("k"), 100, false, 1<<40); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Create with the file system below the guard = %v, want ErrNoSpace", err)
	}
	if !s.Stats().Paused {
		t.Fatal("Stats does not show the paused admission")
	}
}

func TestObjectOverDiskBudgetIsRefused(t *testing.T) {
	s := openStore(t, t.TempDir(), func(c *Config) { c.DiskBytes = 1 << 20 })
	defer s.Close()
	if _, err := s.Create(meta("k"), 2<<20, false, 1<<40); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Create of an object over the disk budget = %v, want ErrNoSpace", err)
	}
}

func TestUnusableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	_, err := Open(Config{Dir: filepath.Join(file, "cache"), DiskBytes: 1 << 20, MemoryBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "data directory") || !strings.Contains(err.Error(), "file/cache") {
		t.Fatalf("Open under a regular file = %v; want an error naming the data directory", err)
	}
}

func mustReader(t testing.TB, w *Writer) io.ReadCloser {
	t.Helper()
	r, err := w.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReaderAfterTheFill(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	for _, size := range []int{1000, 300 << 10} {
		key := fmt.Sprint("k", size)
		w, err := s.Create(meta(key), -1, false, 1<<40)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(body(key, 1, size))
		w.Commit()
		r := mustReader(t, w) // the writer has closed its file by now
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(b, body(key, 1, size)) {
			t.Fatalf("a reader made after the commit got %d bytes, %v", len(b), err)
		}
	}
	w, _ := s.Create(meta("aborted"), -1, false, 1<<40)
	w.Abort(errors.New("cut"))
	if _, err := w.NewReader(); !errors.Is(err, ErrAborted) {
		t.Fatalf("NewReader after Abort = %v, want ErrAborted", err)
	}
	w, _ = s.Create(meta("over"), -1, false, 10)
	w.Write(make([]byte, 100))
	w.Commit()
	if _, err := w.NewReader(); !errors.Is(err, ErrNotStored) {
		t.Fatalf("NewReader after a fill over the maximum = %v, want ErrNotStored", err)
	}
}

func TestDeleteAndKeys(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	for _, k := range []string{"http/a/1", "http/a/2", "http/b/1"} {
		put(t, s, meta(k), body(k, 1, 100), false)
	}
	var under []string
	s.Keys(func(k string) bool {
		if strings.HasPrefix(k, "http/a/") {
			under = append(under, k)
		}
		return true
	})
	slices.Sort(under)
	if !slices.Equal(under, []string{"http/a/1", "http/a/2"}) {
		t.Fatalf("Keys under http/a/ = %v", under)
	}
	for _, k := range under {
		if !s.Delete(k) {
			t.Fatalf("Delete(%s) found nothing", k)
		}
	}
	s.mem.c.Wait()
	if _, ok := s.Get("http/a/1"); ok {
		t.Fatal("a deleted object is still served")
	}
	if s.Delete("http/a/1") {
		t.Fatal("a second Delete found the object again")
	}
	s.Close()
	s = openStore(t, dir)
	defer s.Close()
	if _, ok := s.Get("http/a/2"); ok || s.Loaded() != 1 {
		t.Fatalf("after reopen: deleted object found=%v, %d records; want gone and 1", ok, s.Loaded())
	}
}

func TestMetadataRoundTripsAndPeekReadsIt(t *testing.T) {
	e := meta("k")
	e.URL = "www.example.com/a?b=1"
	e.Coding = Coding
	got, err := decodeMeta(encodeMeta(e))
	if err != nil || got.URL != e.URL || got.Key != "k" || got.Coding != Coding || got.Header.Get("Content-Type") == "" {
		t.Fatalf("decoded %+v, %v; want URL %q", got, err, e.URL)
	}
	// Peek reads an entry's metadata from disk without a body.
	s := openStore(t, t.TempDir(), func(c *Config) { c.MemoryMaxObject, c.ProbationBytes = 1, -1 })
	defer s.Close()
	big := meta("big")
	big.URL = "h/big"
	put(t, s, big, body("big", 1, 4096), false)
	p, ok := s.Peek("big")
	if !ok || p.URL != "h/big" || p.Body != nil || p.Size != 4096 {
		t.Fatalf("Peek: %+v %v", p, ok)
	}
	if _, ok := s.Peek("absent"); ok {
		t.Fatal("Peek found an absent key")
	}
}

// A scan of objects asked for once passes through a full disk tier
// without evicting an object its clients keep asking for (TinyLFU
// admission); with admission off, every scan object is stored and the
// popular object, rewritten forward once, is evicted a lap later. Probation
// is off here: it would keep the scan off the disk altogether.
func TestDiskAdmissionKeepsAFrequentObjectThroughAScan(t *testing.T) {
	const budget = 256 << 10
	for _, admission := range []bool{true, false} {
		t.Run(fmt.Sprintf("admission=%t", admission), func(t *testing.T) {
			s := openStore(t, t.TempDir(), func(c *Config) {
				c.DiskBytes, c.ProbationBytes = budget, -1
				if !admission {
					c.AdmissionPeriod = -1
				}
			})
			defer s.Close()
			s.Get("popular") // the miss that fills it
			put(t, s, meta("popular"), body("popular", 0, 10<<10), false)
			for range 20 {
				if _, ok := s.Get("popular"); !ok {
					t.Fatal("the popular object is not stored")
				}
			}
			stored := 0
			for i := range 300 { // about 3 MiB of objects asked for once
				k := fmt.Sprintf("scan-%d", i)
				s.Get(k)
				if offer(t, s, meta(k), body(k, 0, 10<<10), false) {
					stored++
				}
			}
			_, kept := s.Get("popular")
			st := s.Stats()
			if admission && (!kept || st.Rejected["disk"] == 0) {
				t.Fatalf("after the scan the popular object is kept: %v, %d scan objects refused; want it kept", kept, st.Rejected["disk"])
			}
			if !admission && (kept || st.Rejected["disk"] != 0 || stored != 300) {
				t.Fatalf("without admission: popular object kept %v, %d scan objects refused, %d of 300 stored; want it evicted and all stored",
					kept, st.Rejected["disk"], stored)
			}
			if st.DiskBytes > budget || st.DiskObjects < 10 {
				t.Fatalf("disk tier holds %d bytes in %d objects; want the budget used and held", st.DiskBytes, st.DiskObjects)
			}
		})
	}
}

// Once the disk tier is full, an object asked for once stays on probation
// in memory and never reaches the disk; its second use writes it there,
// and so does a clean stop.
func TestProbationKeepsOneHitObjectsOffTheDisk(t *testing.T) {
	dir := t.TempDir()
	small := func(c *Config) { c.DiskBytes = 256 << 10 }
	s := openStore(t, dir, small)
	for i := 0; s.disk.growing(); i++ { // until every segment was used once
		put(t, s, meta(fmt.Sprintf("fill-%d", i)), body("fill", i, 10<<10), false)
	}
	before := s.Stats()
	for i := range 20 {
		k := fmt.Sprintf("once-%d", i)
		s.Get(k) // the miss
		put(t, s, meta(k), body(k, 0, 1000), false)
	}
	if st := s.Stats(); st.ProbationObjects != 20 || st.Admitted["disk"] != before.Admitted["disk"] {
		t.Fatalf("after 20 objects asked for once: %d on probation, %d more written to disk; want 20 and none",
			st.ProbationObjects, st.Admitted["disk"]-before.Admitted["disk"])
	}
	onDisk := func(k string) bool { h := keyHash(k); return s.disk.stripeOf(h).has(h) }
	if _, ok := s.Get("once-7"); !ok { // its second use
		t.Fatal("an object on probation is not served")
	}
	for deadline := time.Now().Add(10 * time.Second); !onDisk("once-7"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("its second use did not write it to disk")
		}
	}
	if b, _, ok := read(t, s, "once-7"); !ok || !bytes.Equal(b, body("once-7", 0, 1000)) {
		t.Fatal("the promoted object is not served intact")
	}
	s.Close()
	s = openStore(t, dir, small)
	defer s.Close()
	if b, _, ok := read(t, s, "once-12"); !ok || !bytes.Equal(b, body("once-12", 0, 1000)) {
		t.Fatalf("after a clean stop: once-12 served %v; want it, written out at the stop", ok)
	}
}

// After an update, a Get finds the new version at once, never the old
// one the memory tier held.
func TestAnUpdateIsSeenAtOnce(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	for i := range 50 {
		key := fmt.Sprintf("u%d", i)
		put(t, s, meta(key), body(key, 0, 1000), false)
		var old *Entry
		for deadline := time.Now().Add(10 * time.Second); ; {
			e, ok := s.Get(key)
			if ok && e.InMemory() && len(e.Body) == 1000 {
				old = e
				break // the memory tier holds it
			}
			if time.Now().After(deadline) {
				t.Fatal("the object never reached the memory tier")
			}
			time.Sleep(time.Millisecond)
		}
		m := meta(key)
		m.Header.Set("X-Version", "2")
		if _, err := s.Update(old, m); err != nil {
			t.Fatal(err)
		}
		if e, ok := s.Get(key); !ok || e.Header.Get("X-Version") != "2" {
			t.Fatalf("%s right after its update: %v, X-Version %q; want the new version", key, ok, e.Header.Get("X-Version"))
		}
	}
}

// A group's keys are kept with the index: through replacement, deletion,
// eviction and a restart.
func TestGroupsFollowTheIndex(t *testing.T) {
	dir := t.TempDir()
	group := func(k string) (string, bool) {
		g, _, ok := strings.Cut(k, "#")
		return g, ok
	}
	cfg := func(c *Config) { c.Group, c.DiskBytes, c.AdmissionPeriod = group, 1<<20, -1 }
	s := openStore(t, dir, cfg)
	for _, k := range []string{"u1#a", "u1#b", "u1#c", "u2#a", "plain"} {
		put(t, s, meta(k), []byte("body of "+k), false)
	}
	put(t, s, meta("u1#a"), []byte("a newer body"), false) // a replacement is still one key
	if got := s.Count("u1"); got != 3 {
		t.Fatalf("u1 counts %d, want 3", got)
	}
	s.Delete("u1#b")
	if got := s.Members("u1"); len(got) != 2 || slices.Contains(got, "u1#b") {
		t.Fatalf("u1 holds %v after u1#b was deleted", got)
	}
	if s.Count("plain") != 0 || s.Count("u3") != 0 {
		t.Fatal("a key outside every group, or an unknown group, counts")
	}
	s.Close()
	s = openStore(t, dir, cfg)
	if got := s.Count("u1"); got != 2 || s.Count("u2") != 1 {
		t.Fatalf("after a restart u1 counts %d and u2 %d, want 2 and 1", got, s.Count("u2"))
	}
	// Evicted to make room, a key leaves its group.
	big := make([]byte, 300<<10)
	for i := range 4 {
		put(t, s, meta(fmt.Sprintf("filler-%d", i)), big, false)
	}
	held := 0
	s.Keys(func(k string) bool {
		if g, ok := group(k); ok && g == "u1" {
			held++
		}
		return true
	})
	if got := s.Count("u1"); got != held {
		t.Fatalf("u1 counts %d with %d of its keys held", got, held)
	}
	s.Close()
}

// A Delete of a key whose fill is still being written drops that fill:
// it is not stored when it commits (a purge or an invalidation is not
// undone by the old version's fill ending after it), while its readers
// still get the body whole. So for a fill in memory, one in space reserved
// on disk, and one that would go on probation.
func TestADeleteDropsTheFillInProgress(t *testing.T) {
	for _, c := range []struct {
		name string
		size int
		cfg  func(*Config)
	}{
		{"in memory", 10 << 10, func(*Config) {}},
		{"reserved on disk", 3 << 20, func(*Config) {}},
		{"on probation", 1000, func(c *Config) { c.DiskBytes = 256 << 10 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t, t.TempDir(), c.cfg)
			defer s.Close()
			for i := 0; c.name == "on probation" && s.disk.growing(); i++ {
				put(t, s, meta(fmt.Sprintf("fill-%d", i)), body("fill", i, 10<<10), false)
			}
			put(t, s, meta("k"), body("k", 1, c.size), false)
			data := body("k", 2, c.size)
			w, rd, err := s.CreateRead(meta("k"), int64(len(data)), false, 1<<40)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if _, err := w.Write(data[:len(data)/2]); err != nil {
				t.Fatal(err)
			}
			if !s.Delete("k") {
				t.Fatal("the stored version was not deleted")
			}
			if _, err := w.Write(data[len(data)/2:]); err != nil {
				t.Fatal(err)
			}
			if stored, err := w.Commit(); stored || err != nil {
				t.Fatalf("the fill begun before the delete: stored %v (%v); want it dropped", stored, err)
			}
			if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("its reader got %d bytes (%v); want the body whole", len(got), err)
			}
			if _, _, ok := read(t, s, "k"); ok {
				t.Fatal("the key is stored after its delete")
			}
			// A fill begun after the delete is stored.
			put(t, s, meta("k"), body("k", 3, c.size), false)
			if b, _, ok := read(t, s, "k"); !ok || !bytes.Equal(b, body("k", 3, c.size)) {
				t.Fatalf("a fill after the delete: stored %v", ok)
			}
		})
	}
}

// A delete of a group's key (a URL, whose Vary variants the owner groups
// under it) drops the fills of its variants in progress, though no
// variant of theirs is stored yet: an invalidation of the URL is not
// undone by a variant fetched before it.
func TestADeleteOfAGroupDropsItsVariantFillsInProgress(t *testing.T) {
	s := openStore(t, t.TempDir(), func(c *Config) {
		c.Group = func(key string) (string, bool) {
			url, _, ok := strings.Cut(key, "#")
			return url, ok
		}
	})
	defer s.Close()
	data := body("k", 1, 10<<10)
	w, rd, err := s.CreateRead(meta("k#gzip"), int64(len(data)), false, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	other, _, err := s.CreateRead(meta("l#gzip"), int64(len(data)), false, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}
	s.Delete("k")
	if _, err := w.Write(data[len(data)/2:]); err != nil {
		t.Fatal(err)
	}
	if stored, err := w.Commit(); stored || err != nil {
		t.Fatalf("the variant's fill begun before its URL's delete: stored %v (%v); want it dropped", stored, err)
	}
	if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("its reader got %d bytes (%v); want the body whole", len(got), err)
	}
	if _, _, ok := read(t, s, "k#gzip"); ok || len(s.Members("k")) != 0 {
		t.Fatalf("the variant is stored after its URL's delete (members %v)", s.Members("k"))
	}
	// Another URL's variant is not dropped.
	if _, err := other.Write(data); err != nil {
		t.Fatal(err)
	}
	if stored, err := other.Commit(); !stored || err != nil {
		t.Fatalf("another URL's variant: stored %v (%v)", stored, err)
	}
	// A variant fill begun after the delete is stored.
	put(t, s, meta("k#gzip"), body("k", 2, 10<<10), false)
	if b, _, ok := read(t, s, "k#gzip"); !ok || !bytes.Equal(b, body("k", 2, 10<<10)) {
		t.Fatalf("a variant fill after the delete: stored %v", ok)
	}
}
