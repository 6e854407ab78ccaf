package notes

import (
	"fmt"
	"strings"
	"testing"
)

// TestNotesAreBounded: the notes keep the last Max keys, the oldest
// replaced first, a key noted again keeping its place; a key longer than
// MaxKey is not noted.
func TestNotesAreBounded(t *testing.T) {
	var n Table
	for i := range Max + 10 {
		n.Add(fmt.Sprint("k", i), Note{Reason: "uri-miss"})
	}
	n.Add("k20", Note{Reason: "purged"}) // noted again: no new place
	if len(n.m) != Max || len(n.order) != Max {
		t.Fatalf("%d notes in %d places; want %d", len(n.m), len(n.order), Max)
	}
	for i, want := range map[int]bool{0: false, 9: false, 10: true, Max + 9: true} {
		if _, ok := n.Get(fmt.Sprint("k", i)); ok != want {
			t.Errorf("k%d noted %t, want %t", i, ok, want)
		}
	}
	if note, _ := n.Get("k20"); note.Reason != "purged" {
		t.Errorf("k20 noted again: %+v", note)
	}
	n.Add(strings.Repeat("x", MaxKey+1), Note{Reason: "uri-miss"})
	if _, ok := n.Get(strings.Repeat("x", MaxKey+1)); ok {
		t.Error("a key over MaxKey was noted")
	}
}
