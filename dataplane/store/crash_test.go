package store

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// writerEnv makes the test binary a writer that the crash test kills.
const writerEnv = "SHARDCACHE_STORE_CRASH_WRITER"

// writerSyncEnv, set, makes the writer fsync its records (--disk-sync data).
const writerSyncEnv = "SHARDCACHE_STORE_CRASH_WRITER_SYNC"

func TestMain(m *testing.M) {
	if dir := os.Getenv(writerEnv); dir != "" {
		crashWriter(dir)
		return
	}
	os.Exit(m.Run())
}

// crashWriter stores objects under 40 keys, each a new generation of its
// key with a body derived from key and generation, printing a line after
// each commit, until it is killed.
func crashWriter(dir string) {
	s, err := Open(Config{Dir: dir, DiskBytes: 16 << 20, MemoryBytes: 4 << 20, MemoryMaxObject: 32 << 10,
		Sync: os.Getenv(writerSyncEnv) != "", Logger: slog.New(slog.DiscardHandler)})
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
		w, err := s.Create(e, -1, gen%3 == 0, 1<<40)
		if err != nil {
			fmt.Println("create:", err)
			os.Exit(1)
		}
		b := body(key, gen, size)
		for len(b) > 0 {
			n := min(len(b), 1+rand.IntN(64<<10))
			w.Write(b[:n])
			b = b[n:]
		}
		w.Commit()
		fmt.Fprintln(out, "committed", key, gen)
		out.Flush()
	}
}

// TestSIGKILLNeverLeavesATornObject kills a writing process at random
// points, then reads every object back: each one served must be exactly
// the body of the generation its header names.
func TestSIGKILLNeverLeavesATornObject(t *testing.T) {
	dir := t.TempDir()
	var served, rounds int
	for rounds = 0; rounds < 12; rounds++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), writerEnv+"="+dir)
		if rounds%2 == 1 {
			cmd.Env = append(cmd.Env, writerSyncEnv+"=1") // every other round with fsync
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a random number of commits, at whatever point the
		// writer has reached in the next one.
		lines := bufio.NewScanner(stdout)
		for range 1 + rand.IntN(25) {
			if !lines.Scan() {
				t.Fatalf("writer stopped early: %v", lines.Err())
			}
			if !bytes.HasPrefix(lines.Bytes(), []byte("committed")) {
				t.Fatalf("writer: %s", lines.Bytes())
			}
		}
		cmd.Process.Kill()
		cmd.Wait()

		s := openStore(t, dir, func(c *Config) { c.DiskBytes, c.MemoryMaxObject = 16<<20, 32<<10 })
		for i := range 40 {
			key := fmt.Sprintf("k%d", i)
			b, e, ok := read(t, s, key)
			if !ok {
				continue
			}
			gen, err := strconv.Atoi(e.Header.Get("X-Gen"))
			if err != nil {
				t.Fatalf("round %d: %s has no generation: %v", rounds, key, e.Header)
			}
			size, _ := strconv.Atoi(e.Header.Get("X-Size"))
			if want := body(key, gen, size); !bytes.Equal(b, want) {
				t.Fatalf("round %d: %s generation %d served a wrong or torn body of %d bytes, want %d", rounds, key, gen, len(b), size)
			}
			served++
		}
		s.Close()
	}
	if served < rounds {
		t.Fatalf("only %d objects read back over %d rounds; the test checks too little", served, rounds)
	}
	t.Logf("%d objects read back intact over %d kills", served, rounds)
}
