package reply

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An upstream that breaks off breaks the recorder's answer off: what came
// is passed, nothing after, and the handler is told to abort.
func TestPassBreaksTheAnswerOffWithItsUpstream(t *testing.T) {
	rec := NewRecorder(httptest.NewRecorder())
	broken := io.MultiReader(strings.NewReader("half"), errorReader{errors.New("connection reset")})
	nb, brokeOff := Pass(rec, broken)
	if nb != 4 || !brokeOff || !rec.Broken {
		t.Fatalf("passed %d bytes, broke off %v, recorder broken %v; want 4, true, true", nb, brokeOff, rec.Broken)
	}
	if _, err := rec.Write([]byte("more")); !errors.Is(err, ErrBrokenOff) {
		t.Fatalf("a write after the break: %v, want ErrBrokenOff", err)
	}
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Fatalf("AbortIfBroken panicked with %v, want http.ErrAbortHandler", v)
		}
	}()
	rec.AbortIfBroken()
}

// A whole upstream body is passed and the answer ends cleanly.
func TestPassCopiesAWholeBody(t *testing.T) {
	w := httptest.NewRecorder()
	rec := NewRecorder(w)
	if nb, brokeOff := Pass(rec, strings.NewReader("whole")); nb != 5 || brokeOff || rec.Broken || w.Body.String() != "whole" {
		t.Fatalf("passed %d bytes, broke off %v, body %q", nb, brokeOff, w.Body.String())
	}
	rec.AbortIfBroken() // must not panic
}

// A writer no handler wrapped cannot be told: BreakOff aborts at once.
func TestBreakOffAbortsAnUnwrappedWriter(t *testing.T) {
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Fatalf("BreakOff panicked with %v, want http.ErrAbortHandler", v)
		}
	}()
	BreakOff(httptest.NewRecorder())
}

type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }
