package registry

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWriteErrorNamesTheCause(t *testing.T) {
	// A streamed blob whose check failed, wrapped by the fill that
	// carried it, before any byte reached the client.
	v, _ := Verify(strings.NewReader("a poisoned layer"), "sha256:"+strings.Repeat("0", 64), nil)
	_, digestErr := io.ReadAll(v)
	for _, c := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("fill failed: %w", digestErr), CodeDigestInvalid},
		{errors.New("connection reset"), CodeUpstream},
		{nil, CodeUpstream},
		{&Error{Status: http.StatusNotFound, Code: "BLOB_UNKNOWN", Message: "no such blob"}, "BLOB_UNKNOWN"},
	} {
		w := httptest.NewRecorder()
		WriteError(w, c.err, http.StatusBadGateway, "registry a.io: origin response broke off")
		if !strings.Contains(w.Body.String(), `"code":"`+c.code+`"`) {
			t.Errorf("%v: %d %s, want code %s", c.err, w.Code, w.Body, c.code)
		}
		if w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%v: Content-Type %q", c.err, w.Header().Get("Content-Type"))
		}
	}
}
