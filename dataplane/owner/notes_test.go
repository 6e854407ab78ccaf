package owner

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
)

// TestNotesAreBounded: the notes keep the last maxNotes keys, the oldest
// replaced first, a key noted again keeping its place; a key longer than
// maxNoteKey is not noted.
func TestNotesAreBounded(t *testing.T) {
	var n notes
	for i := range maxNotes + 10 {
		n.add(fmt.Sprint("k", i), Note{Reason: httpcache.ReasonURIMiss})
	}
	n.add("k20", Note{Reason: httpcache.ReasonPurged}) // noted again: no new place
	if len(n.m) != maxNotes || len(n.order) != maxNotes {
		t.Fatalf("%d notes in %d places; want %d", len(n.m), len(n.order), maxNotes)
	}
	for i, want := range map[int]bool{0: false, 9: false, 10: true, maxNotes + 9: true} {
		if _, ok := n.get(fmt.Sprint("k", i)); ok != want {
			t.Errorf("k%d noted %t, want %t", i, ok, want)
		}
	}
	if note, _ := n.get("k20"); note.Reason != httpcache.ReasonPurged {
		t.Errorf("k20 noted again: %+v", note)
	}
	n.add(strings.Repeat("x", maxNoteKey+1), Note{Reason: httpcache.ReasonURIMiss})
	if _, ok := n.get(strings.Repeat("x", maxNoteKey+1)); ok {
		t.Error("a key over maxNoteKey was noted")
	}
}

// TestAccountsAreBounded: an account keeps maxCalls calls and counts the
// rest; the field a peer sends back nests no account of its own, and one
// read back keeps at most maxCalls.
func TestAccountsAreBounded(t *testing.T) {
	a := &Account{Lookup: time.Millisecond}
	for i := range maxCalls + 3 {
		a.Record(CallOrigin, "", &http.Response{StatusCode: 200 + i}, nil, time.Duration(i))
	}
	if len(a.Calls) != maxCalls || a.Dropped != 3 {
		t.Fatalf("%d calls kept, %d dropped; want %d and 3", len(a.Calls), a.Dropped, maxCalls)
	}
	a.Calls[0].Account = &Account{Calls: []Call{{Kind: CallOrigin}}}
	back := ParseAccount(a.Field())
	if back == nil || back.Lookup != time.Millisecond || len(back.Calls) != maxCalls || back.Calls[0].Account != nil || back.Dropped != 3 {
		t.Fatalf("read back %+v", back)
	}
	var nilAccount *Account
	nilAccount.Record(CallOrigin, "", nil, nil, 0) // records nothing, and does not fail
	if !nilAccount.Now().IsZero() {
		t.Fatal("a nil account read the clock")
	}
	if ParseAccount(`{"calls":[`) != nil || ParseAccount("") != nil {
		t.Fatal("a field that cannot be read gave an account")
	}
}
