// Package h2frames counts the HTTP/2 frames a connection reads, by kind:
// how a test sees what a gRPC transport sends besides the messages (window
// updates, pings) without a packet capture.
package h2frames

import (
	"io"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
)

// Counts are the frames read so far on a watched connection.
type Counts struct {
	data, pings, windowUpdates atomic.Int64
	done                       chan struct{}
}

// Done is closed once counting has ended: the connection was closed or
// failed, and every frame read before was counted.
func (c *Counts) Done() <-chan struct{} { return c.done }

// Data is the DATA frames read.
func (c *Counts) Data() int64 { return c.data.Load() }

// Pings is the PING frames read that ask for an answer (not the answers).
func (c *Counts) Pings() int64 { return c.pings.Load() }

// WindowUpdates is the WINDOW_UPDATE frames read.
func (c *Counts) WindowUpdates() int64 { return c.windowUpdates.Load() }

// Watch returns c with what it reads also parsed as HTTP/2 frames and
// counted. preface says the peer is a client, which starts with the
// connection preface before its first frame. Parsing never holds a read
// up for long: what cannot be parsed is dropped, and counting stops.
func Watch(c net.Conn, preface bool) (net.Conn, *Counts) {
	pr, pw := io.Pipe()
	w := &watched{Conn: c, pw: pw, counts: &Counts{done: make(chan struct{})}}
	go w.parse(pr, preface)
	return w, w.counts
}

type watched struct {
	net.Conn
	pw     *io.PipeWriter
	counts *Counts
	once   sync.Once
}

func (w *watched) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if n > 0 {
		w.pw.Write(p[:n]) // the parser drains the pipe until it is closed
	}
	if err != nil {
		w.once.Do(func() { w.pw.CloseWithError(err) })
	}
	return n, err
}

func (w *watched) Close() error {
	w.once.Do(func() { w.pw.Close() })
	return w.Conn.Close()
}

func (w *watched) parse(pr *io.PipeReader, preface bool) {
	defer close(w.counts.done)
	defer io.Copy(io.Discard, pr)
	if preface {
		if _, err := io.ReadFull(pr, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
	}
	fr := http2.NewFramer(nil, pr)
	fr.SetMaxReadFrameSize(1 << 24)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			w.counts.data.Add(1)
		case *http2.PingFrame:
			if !f.IsAck() {
				w.counts.pings.Add(1)
			}
		case *http2.WindowUpdateFrame:
			w.counts.windowUpdates.Add(1)
		}
	}
}
