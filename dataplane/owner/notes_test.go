package owner

import (
	"net/http"
	"testing"
	"time"
)

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
