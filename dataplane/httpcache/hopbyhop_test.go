package httpcache

import (
	"net/http"
	"testing"
)

func TestRemoveHopByHop(t *testing.T) {
	h := http.Header{}
	h.Set("Connection", "keep-alive, X-Private")
	h.Set("X-Private", "1")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("Transfer-Encoding", "chunked")
	h.Set("X-End-To-End", "kept")
	RemoveHopByHop(h)
	if len(h) != 1 || h.Get("X-End-To-End") != "kept" {
		t.Fatalf("after removal: %v", h)
	}
}
