package store

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func entry(key string, size int) *Entry {
	return &Entry{Key: key, Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: make([]byte, size), Received: time.Now(), Lifetime: time.Hour}
}

func TestMemorySetGetDelete(t *testing.T) {
	m, err := NewMemory(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e := entry("k", 100)
	if !m.Set(e) {
		t.Fatal("an entry far below the budget was not admitted")
	}
	got, ok := m.Get("k")
	if !ok || got != e {
		t.Fatalf("Get after Set = %v, %v", got, ok)
	}
	bytes, objects := m.Stats()
	if objects != 1 || bytes != e.Cost() {
		t.Fatalf("Stats = %d bytes, %d objects; want %d, 1", bytes, objects, e.Cost())
	}
	m.Delete("k")
	m.c.Wait()
	if _, ok := m.Get("k"); ok {
		t.Fatal("entry still there after Delete")
	}
}

func TestMemoryStaysWithinBudget(t *testing.T) {
	const budget = 64 << 10
	m, err := NewMemory(budget)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := range 200 {
		m.Set(entry(fmt.Sprintf("k%d", i), 1000))
	}
	if bytes, _ := m.Stats(); bytes > budget {
		t.Fatalf("tier holds %d bytes, budget %d", bytes, budget)
	}
	if m.Set(entry("huge", budget*2)) {
		t.Fatal("an entry larger than the whole budget was admitted")
	}
}

func TestNewMemoryRefusesZeroBudget(t *testing.T) {
	if _, err := NewMemory(0); err == nil {
		t.Fatal("a zero budget was accepted")
	}
}

func TestEntryFreshness(t *testing.T) {
	now := time.Now()
	e := &Entry{Received: now.Add(-30 * time.Second), InitialAge: 10 * time.Second, Lifetime: time.Minute}
	if got := e.Age(now); got != 40*time.Second {
		t.Fatalf("Age = %s, want 40s", got)
	}
	if !e.Fresh(now) {
		t.Fatal("entry at 40s of a 60s lifetime is not fresh")
	}
	if e.Fresh(now.Add(30 * time.Second)) {
		t.Fatal("entry at 70s of a 60s lifetime is fresh")
	}
}

// The tier's counts stay exact through deletions and replacements, and
// only evictions to make room count as evictions.
func TestMemoryCountsStayExact(t *testing.T) {
	m, err := NewMemory(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	entry := func(i, size int) *Entry {
		return &Entry{Key: fmt.Sprint(i), Header: http.Header{}, Body: make([]byte, size)}
	}
	for i := range 100 {
		m.Set(entry(i, 1000))
	}
	for i := range 50 {
		m.Delete(fmt.Sprint(i))
	}
	for i := 50; i < 60; i++ {
		m.Set(entry(i, 2000)) // replaced, larger
	}
	m.c.Wait()
	var want int64
	for i := 50; i < 100; i++ {
		if e, ok := m.Get(fmt.Sprint(i)); ok {
			want += e.Cost()
		}
	}
	bytes, objects := m.Stats()
	if objects != 50 || bytes != want {
		t.Errorf("after 100 sets, 50 deletes and 10 replacements: %d objects of %d bytes, want 50 of %d", objects, bytes, want)
	}
	if _, evicted, _ := m.Counts(); evicted != 0 {
		t.Errorf("%d evictions counted with the tier never full", evicted)
	}
}

// An entry held in memory makes its header's product once, shared by
// every answer; a copy of it with another header makes its own; an entry
// read from disk (no body held) makes it each time.
func TestEntryHeadIsMadeOncePerHeader(t *testing.T) {
	builds := 0
	build := func(h http.Header) any { builds++; return h.Get("Etag") }
	e := &Entry{Key: "k", Header: http.Header{"Etag": {`"1"`}}, Body: []byte("b")}
	for range 3 {
		if v := e.Head(build); v != `"1"` {
			t.Fatalf("head %v", v)
		}
	}
	if builds != 1 {
		t.Fatalf("made %d times for one entry in memory, want once", builds)
	}
	c := *e
	c.Header = http.Header{"Etag": {`"2"`}}
	if v := c.Head(build); v != `"2"` || builds != 2 {
		t.Fatalf("a copy with another header: head %v after %d makes", v, builds)
	}
	d := &Entry{Key: "k", Header: e.Header, Size: 10}
	d.Head(build)
	d.Head(build)
	if builds != 4 {
		t.Fatalf("an entry read from disk: %d makes, want one per call", builds)
	}
}
