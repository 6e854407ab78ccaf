package h2frames

import (
	"net"
	"testing"

	"golang.org/x/net/http2"
)

// Frames written by one side are counted by kind on the other; answers to
// pings are not pings.
func TestCountsWhatThePeerSends(t *testing.T) {
	client, server := net.Pipe()
	watched, counts := Watch(server, true)
	go func() {
		client.Write([]byte(http2.ClientPreface))
		fr := http2.NewFramer(client, nil)
		fr.WriteSettings()
		fr.WritePing(false, [8]byte{1})
		fr.WritePing(true, [8]byte{2})
		fr.WriteData(1, false, []byte("abc"))
		fr.WriteData(1, true, nil)
		fr.WriteWindowUpdate(0, 100)
		fr.WritePing(false, [8]byte{3})
		client.Close()
	}()
	buf := make([]byte, 7)
	for {
		if _, err := watched.Read(buf); err != nil {
			break
		}
	}
	watched.Close()
	<-counts.Done()
	if counts.Data() != 2 || counts.WindowUpdates() != 1 || counts.Pings() != 2 {
		t.Errorf("data %d, window updates %d, pings %d; want 2, 1, 2", counts.Data(), counts.WindowUpdates(), counts.Pings())
	}
}
