package owner

import (
	"encoding/json"
	"net/http"
	"time"
)

// Account is a request's account, kept only while a full log stream asks
// for one (Request.Account set): the time of each stage, and every
// request made on its behalf. The stages fill it in on the request's own
// goroutine; work that outlives the request (a background revalidation,
// a fill's store goroutine) and the slices of an assembled object keep
// none.
type Account struct {
	// Lookup is the lookup and the decision; CollapseWait the wait on
	// another request's fill; OriginFirstByte the wait for the origin's
	// (or the filling peer's) header; Store the answer streaming into the
	// store (and to the client with it).
	Lookup          time.Duration `json:"lookup,omitempty"`
	CollapseWait    time.Duration `json:"collapse_wait,omitempty"`
	OriginFirstByte time.Duration `json:"origin_first_byte,omitempty"`
	Store           time.Duration `json:"store,omitempty"`
	// Calls are the requests made on the request's behalf, in order, at
	// most maxCalls.
	Calls []Call `json:"calls,omitempty"`
	// Dropped counts the calls beyond maxCalls.
	Dropped int `json:"dropped,omitempty"`
}

// Call is one request made on a client request's behalf.
type Call struct {
	// Kind is origin, peer (the key's owner, relayed to), first-owner (a
	// hot key's, filled from) or handoff (the key's previous owner).
	Kind   string `json:"kind"`
	Node   string `json:"node,omitempty"` // the peer asked; "" for the origin
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// FirstByte is the wait for its answer's header (or its failure).
	FirstByte time.Duration `json:"first_byte"`
	// Account is the peer's own account of the request, when it sent one.
	Account *Account `json:"account,omitempty"`
}

// Kinds of Call.
const (
	CallOrigin     = "origin"
	CallPeer       = "peer"
	CallFirstOwner = "first-owner"
	CallHandoff    = "handoff"
)

// maxCalls bounds the calls an account lists.
const maxCalls = 8

// Add appends c, or counts it past maxCalls.
func (a *Account) Add(c Call) {
	if len(a.Calls) >= maxCalls {
		a.Dropped++
		return
	}
	a.Calls = append(a.Calls, c)
}

// Record adds a request made for the account's request: its kind, the
// peer ("" for the origin), its answer or failure, and the wait for it.
// A nil account records nothing.
func (a *Account) Record(kind, node string, resp *http.Response, err error, took time.Duration) {
	if a == nil {
		return
	}
	c := Call{Kind: kind, Node: node, FirstByte: took}
	switch {
	case err != nil:
		c.Error = err.Error()
	case resp != nil:
		c.Status = resp.StatusCode
	}
	a.Add(c)
}

// Field is a as the peer hop's account field carries it (JSON), a nested
// account's own calls left out: one level is sent back.
func (a *Account) Field() string {
	flat := *a
	flat.Calls = make([]Call, len(a.Calls))
	for i, c := range a.Calls {
		c.Account = nil
		flat.Calls[i] = c
	}
	b, _ := json.Marshal(&flat)
	return string(b)
}

// ParseAccount reads a peer's account field; nil when there is none or it
// cannot be read.
func ParseAccount(v string) *Account {
	if v == "" {
		return nil
	}
	var a Account
	if json.Unmarshal([]byte(v), &a) != nil {
		return nil
	}
	if len(a.Calls) > maxCalls {
		a.Calls = a.Calls[:maxCalls]
	}
	return &a
}

// Now is the time, when the request keeps an account; zero (and no clock
// read) otherwise.
func (a *Account) Now() time.Time {
	if a == nil {
		return time.Time{}
	}
	return time.Now()
}
