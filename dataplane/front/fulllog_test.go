package front

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/sdk/admin"
)

// TestLoggedFieldsAreBoundedAndRedacted: a full record shows at most
// admin.MaxLogFields fields (the first by name), values cut at
// admin.MaxLogValue bytes, credentials as REDACTED, no hop field.
func TestLoggedFieldsAreBoundedAndRedacted(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer s3cret"}, "Cookie": {"a=s3cret"}, "X-Api-Token": {"s3cret"},
		"X-Shardcache-Hop": {"a"}, "Accept": {strings.Repeat("a", admin.MaxLogValue+10)}}
	for i := range admin.MaxLogFields {
		h.Set(fmt.Sprintf("X-F%02d", i), "v")
	}
	got := loggedFields(h)
	if len(got) != admin.MaxLogFields {
		t.Fatalf("%d fields, want %d", len(got), admin.MaxLogFields)
	}
	for _, k := range []string{"Authorization", "Cookie", "X-Api-Token"} {
		if v := got[k]; len(v) != 1 || v[0] != "REDACTED" {
			t.Errorf("%s: %q, want REDACTED", k, v)
		}
	}
	if v := got["Accept"][0]; len(v) != admin.MaxLogValue+3 || !strings.HasSuffix(v, "...") {
		t.Errorf("a long value shown as %d bytes", len(v))
	}
	if _, ok := got["X-Shardcache-Hop"]; ok {
		t.Error("a hop field in a full record")
	}
	if _, ok := got[fmt.Sprintf("X-F%02d", admin.MaxLogFields-1)]; ok {
		t.Error("kept a field past the bound, by name")
	}
}
