package registry

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestTokensExpireEarlyAndStayBounded(t *testing.T) {
	tk := newTokens()
	now := time.Unix(1000, 0)
	tk.now = func() time.Time { return now }
	fetches := 0
	fetch := func(context.Context) (token, error) {
		fetches++
		return token{value: fmt.Sprint("t", fetches), expires: now.Add(54 * time.Second)}, nil
	}
	if v, _ := tk.get(context.Background(), "s", fetch); v != "t1" {
		t.Fatal(v)
	}
	now = now.Add(53 * time.Second)
	if v := tk.cached("s"); v != "t1" {
		t.Fatalf("before expiry: %q", v)
	}
	now = now.Add(time.Second)
	if v := tk.cached("s"); v != "" {
		t.Fatalf("at expiry: %q kept", v)
	}
	if v, _ := tk.get(context.Background(), "s", fetch); v != "t2" || fetches != 2 {
		t.Fatalf("after expiry: %q, %d fetches", v, fetches)
	}
	// At the bound, the expired go first; with none expired, all go.
	for i := range maxTokens + 5 {
		tk.mu.Lock()
		tk.keepLocked(fmt.Sprint("scope", i), token{value: "x", expires: now.Add(time.Hour)})
		n := len(tk.kept)
		tk.mu.Unlock()
		if n > maxTokens {
			t.Fatalf("%d tokens kept, bound %d", n, maxTokens)
		}
	}
}
