package reply

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadEnd: a body at its end is nil; one with more bytes is
// ErrNotAtEnd; a reader's failure is its own; reads of no bytes and no
// error are read past.
func TestReadEnd(t *testing.T) {
	scratch := make([]byte, 1)
	fail := errors.New("broke")
	for name, c := range map[string]struct {
		r    io.Reader
		want error
	}{
		"at its end":  {strings.NewReader(""), nil},
		"more":        {strings.NewReader("x"), ErrNotAtEnd},
		"a failure":   {iotest.ErrReader(fail), fail},
		"empty reads": {&emptyThenEOF{n: 3}, nil},
	} {
		if err := ReadEnd(c.r, scratch); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// emptyThenEOF reads nothing, without an error, n times, then ends.
type emptyThenEOF struct{ n int }

func (e *emptyThenEOF) Read([]byte) (int, error) {
	if e.n == 0 {
		return 0, io.EOF
	}
	e.n--
	return 0, nil
}
