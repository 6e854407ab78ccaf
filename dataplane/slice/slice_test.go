package slice

import (
	"net/http"
	"testing"
)

func TestSliceHeaders(t *testing.T) {
	for _, v := range []string{"1", "x/65536", "-1/65536", "1/100", "9223372036854775807/65536"} {
		if _, err := ParseHeader(http.Header{"X-Shardcache-Slice": {v}}); err == nil {
			t.Errorf("slice header %q accepted", v)
		}
	}
	s, err := ParseHeader(http.Header{"X-Shardcache-Slice": {"3/65536"}, "X-Shardcache-Slice-Version": {`"v1"`}})
	if err != nil || s.Index != 3 || s.Size != 65536 || s.Version != `"v1"` || s.Start() != 3*65536 {
		t.Errorf("slice header: %+v, %v", s, err)
	}
}
