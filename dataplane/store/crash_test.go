package store

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writerEnv makes the test binary a writer that the crash test kills.
const writerEnv = "SHARDCACHE_STORE_CRASH_WRITER"

// writerSyncEnv, set, makes the writer sync its buffers (--disk-sync data).
const writerSyncEnv = "SHARDCACHE_STORE_CRASH_WRITER_SYNC"

func TestMain(m *testing.M) {
	if dir := os.Getenv(writerEnv); dir != "" {
		crashWriter(dir)
		return
	}
	os.Exit(m.Run())
}

// crashConfig is the store the crash test's writer and reader open: small
// segments, so that reclaims and runs happen within a few fills, and no
// admission, so that every fill is written (the writer asks for no key
// more often than another).
func crashConfig(dir string, sync bool) Config {
	return Config{Dir: dir, DiskBytes: 8 << 20, MemoryBytes: 4 << 20, MemoryMaxObject: 32 << 10, ProbationBytes: -1, AdmissionPeriod: -1,
		Sync: sync, CheckpointPeriod: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
}

// crashWriter stores objects under 40 keys, each a new generation of its
// key with a body derived from key and generation, of a known length or
// not, sometimes compressed, printing a line after each commit (with
// whether it was stored, and where: record offset and segment seq), until
// it is killed.
func crashWriter(dir string) {
	s, err := Open(crashConfig(dir, os.Getenv(writerSyncEnv) != ""))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	<-s.Ready()
	out := bufio.NewWriter(os.Stdout)
	for gen := int(time.Now().UnixNano() % 1e9); ; gen++ {
		key := fmt.Sprintf("k%d", gen%40)
		size := 1 + rand.IntN(400<<10)
		e := meta(key)
		e.Header.Set("X-Gen", strconv.Itoa(gen))
		e.Header.Set("X-Size", strconv.Itoa(size))
		hint := int64(-1)
		if gen%2 == 0 {
			hint = int64(size)
		}
		w, err := s.Create(e, hint, gen%3 == 0, 1<<40)
		if err != nil {
			fmt.Fprintln(out, "skipped", key, gen, err)
			out.Flush()
			continue
		}
		b := body(key, gen, size)
		for len(b) > 0 {
			n := min(len(b), 1+rand.IntN(64<<10))
			w.Write(b[:n])
			b = b[n:]
		}
		stored, _ := w.Commit()
		at := recRef{off: -1}
		if stored {
			at = *w.final.ref
		}
		fmt.Fprintln(out, "committed", key, gen, stored, at.off, at.seq)
		out.Flush()
	}
}

// TestSIGKILLNeverLeavesATornObject kills a writing process at random
// points, 200 times, then reads every object back: each one served must be
// exactly the body of the generation its header names. Every other round
// syncs (--disk-sync data): there an object whose commit the writer
// reported stored is never lost to the kill (missing while its record is
// still on disk, in a segment of the seq it was written under), nor
// replaced by an older generation. Every fourth round the index checkpoint
// is removed before the reader opens, so the index is rebuilt from the
// segments alone.
func TestSIGKILLNeverLeavesATornObject(t *testing.T) {
	dir := t.TempDir()
	var served, stale, rebuilt int
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	for round := range rounds {
		sync := round%2 == 1
		committed := crashRound(t, dir, sync)
		if round%4 == 0 {
			os.Remove(filepath.Join(dir, ckptName))
			rebuilt++
		}
		s, err := Open(crashConfig(dir, false))
		if err != nil {
			t.Fatal(err)
		}
		<-s.Ready()
		for i := range 40 {
			key := fmt.Sprintf("k%d", i)
			b, e, ok := read(t, s, key)
			c, was := committed[key]
			if !ok {
				if sync && was {
					// A synced, stored object may still have been evicted by
					// later fills, never lost: check it was.
					if s.disk.onDisk(key, c) {
						t.Fatalf("round %d (synced): %s generation %d, committed at %d, lost: its record is still there", round, key, c.gen, c.off)
					}
					stale++
				}
				continue
			}
			gen, err := strconv.Atoi(e.Header.Get("X-Gen"))
			if err != nil {
				t.Fatalf("round %d: %s has no generation: %v", round, key, e.Header)
			}
			size, _ := strconv.Atoi(e.Header.Get("X-Size"))
			if want := body(key, gen, size); !bytes.Equal(b, want) {
				t.Fatalf("round %d: %s generation %d served a wrong or torn body of %d bytes, want %d", round, key, gen, len(b), size)
			}
			if sync && gen < c.gen {
				t.Fatalf("round %d (synced): %s served generation %d, older than generation %d the writer committed", round, key, gen, c.gen)
			}
			served++
		}
		s.Close()
	}
	if served < rounds {
		t.Fatalf("only %d objects read back over %d rounds; the test checks too little", served, rounds)
	}
	t.Logf("%d objects read back intact over %d kills (%d rebuilt without a checkpoint); %d synced objects missing, evicted by later fills",
		served, rounds, rebuilt, stale)
}

// crashCommit is a commit the crash writer reported stored.
type crashCommit struct {
	gen int
	off int64  // its record's offset in the data file
	seq uint64 // its segment's seq when it was written
}

// onDisk reports whether c's record is still in the data file: key's
// generation, under a segment header of the seq it was written under.
func (d *disk) onDisk(key string, c crashCommit) bool {
	b := make([]byte, headRead)
	n, _ := d.f().ReadAt(b, c.off)
	p, err := parsePrefix(b[:n])
	if err != nil || p.seq != c.seq || prefixLen+int(p.metaLen) > n {
		return false
	}
	e, err := decodeMeta(b[prefixLen : prefixLen+p.metaLen])
	if err != nil || e.Key != key || e.Header.Get("X-Gen") != strconv.Itoa(c.gen) {
		return false
	}
	hb := make([]byte, segHdrLen)
	if _, err := d.f().ReadAt(hb, c.off/d.g.segSize*d.g.segSize); err != nil {
		return false
	}
	h, err := decodeSegHeader(d.g, hb)
	return err == nil && h.seq == c.seq
}

// crashRound runs a writer on dir and kills it after a random number of
// commits, at whatever point it has reached in the next one. It returns
// the newest commit the writer reported stored, by key.
func crashRound(t *testing.T, dir string, sync bool) map[string]crashCommit {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+dir)
	if sync {
		cmd.Env = append(cmd.Env, writerSyncEnv+"=1")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	committed := map[string]crashCommit{}
	lines := bufio.NewScanner(stdout)
	for n := 1 + rand.IntN(30); n > 0; {
		if !lines.Scan() {
			t.Fatalf("writer stopped early: %v", lines.Err())
		}
		f := strings.Fields(lines.Text())
		switch {
		case len(f) == 6 && f[0] == "committed":
			if f[3] == "true" {
				var c crashCommit
				c.gen, _ = strconv.Atoi(f[2])
				c.off, _ = strconv.ParseInt(f[4], 10, 64)
				c.seq, _ = strconv.ParseUint(f[5], 10, 64)
				committed[f[1]] = c
			}
			n--
		case len(f) >= 3 && f[0] == "skipped":
		default:
			t.Fatalf("writer: %s", lines.Text())
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	return committed
}
