package dataplane

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/shardcache/shardcache/dataplane/hop"
)

// A peer that opens HTTP/2 streams and never opens a flow-control window
// for their answers must not hold the node's handlers, and the stored
// objects they read, for as long as its connection lives: once no byte
// is taken for the peer send bound, each stream is reset.
func TestPeerStreamsThatTakeNothingAreReset(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte(big))
	}))
	defer origin.Close()
	_, a := startOne(t, origin.URL, noHotKeys, func(c *Config) {
		c.ClientSendTimeout, c.OriginTimeout, c.RelayTimeout = 100*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
	})
	if resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+"/big"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	c, err := net.Dial("tcp", a.PeerAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	// No window for any stream's answer, ever.
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	const streams = 50
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range streams {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/big"}, {strings.ToLower(hop.Marker), "b"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	var answered, reset atomic.Int32
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.HeadersFrame:
				answered.Add(1)
			case *http2.RSTStreamFrame:
				reset.Add(1)
			}
		}
	}()
	waitFor(t, "every stream that takes nothing to be reset", func() bool { return reset.Load() == streams })
	if got := answered.Load(); got != streams {
		t.Fatalf("%d of %d streams had their answer's head", got, streams)
	}
}
