package owner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/hotkey"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A peer's hot-key list (asked for at each ring change) is read up to
// hotkey.ListMax keys and hotkey.MaxListBytes bytes: a list at the bound is
// taken; one past it, in keys or in bytes, is refused whole and read no
// further, so a peer cannot grow this node's memory by answering more.
func TestAPeersHotKeyListIsReadWithinItsBound(t *testing.T) {
	keys := func(n int) string {
		var b strings.Builder
		b.WriteString("[")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"key":"httpwww.example.com/k%d","host":"www.example.com","uri":"/k%d","rate":1}`, i, i)
		}
		b.WriteString("]")
		return b.String()
	}
	huge := io.MultiReader(strings.NewReader(`[{"key":"`), strings.NewReader(strings.Repeat("x", 4*hotkey.MaxListBytes)),
		strings.NewReader(`","host":"www.example.com","uri":"/x","rate":1}]`))
	for _, tt := range []struct {
		name string
		body io.Reader
		want int // keys taken; -1: refused
	}{
		{"at the bound", strings.NewReader(keys(hotkey.ListMax)), hotkey.ListMax},
		{"one key past the bound", strings.NewReader(keys(hotkey.ListMax + 1)), -1},
		{"empty objects past the bound", strings.NewReader("[" + strings.Repeat("{},", 1<<20) + "{}]"), -1},
		{"one key past the byte bound", huge, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			to := newTestOwner(t, cacheable("origin"))
			var read atomic.Int64
			body := &countingReader{r: tt.body, add: func(n float64) { read.Add(int64(n)) }}
			to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
				if h.Get(hop.HotKeysField) == "" {
					t.Errorf("asked for something other than the hot keys: %v", h)
				}
				return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(body)}, nil
			}
			got := to.peerHotKeys(context.Background(), &pb.Member{Id: "b", PeerAddress: "10.0.0.2:1"})
			t.Logf("%s: %d keys taken, %d bytes read", tt.name, len(got), read.Load())
			if tt.want < 0 && got != nil || tt.want >= 0 && len(got) != tt.want {
				t.Fatalf("%d keys taken, want %d (-1: the list refused)", len(got), tt.want)
			}
			if n := read.Load(); n > hotkey.MaxListBytes+64<<10 {
				t.Fatalf("read %d bytes of the list, past its bound of %d", n, hotkey.MaxListBytes)
			}
		})
	}
}
