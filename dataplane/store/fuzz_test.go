package store

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeHead feeds arbitrary bytes to the record-head decoder: it must
// refuse them or return an entry that encodes and decodes to itself, and
// never panic or allocate past the head's own size.
func FuzzDecodeHead(f *testing.F) {
	e := &Entry{Key: "httpexample.com/a?b=1", URL: "example.com/a?b=1", Status: 200, Coding: "zstd",
		Header:   http.Header{"Content-Type": {"text/plain"}, "Etag": {`"v1"`}, "Vary": {"Accept-Encoding", "Origin"}},
		Received: time.Unix(1700000000, 5), InitialAge: time.Second, Lifetime: time.Hour}
	f.Add(encodeHead(e))
	f.Add(encodeHead(&Entry{Key: "k", Header: http.Header{}}))
	b := encodeHead(e)
	b[len(b)-1] ^= 1 // a bad checksum
	f.Add(b)
	f.Add([]byte(recordMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeHead(b)
		if err != nil {
			if got != nil {
				t.Fatalf("an entry with error %v", err)
			}
			return
		}
		again, err := decodeHead(encodeHead(got))
		if err != nil {
			t.Fatalf("a decoded head does not decode once encoded again: %v", err)
		}
		if again.Key != got.Key || again.URL != got.URL || again.Status != got.Status || !again.Received.Equal(got.Received) ||
			again.InitialAge != got.InitialAge || again.Lifetime != got.Lifetime || again.Coding != got.Coding ||
			!reflect.DeepEqual(again.Header, got.Header) {
			t.Fatalf("round trip changed the entry: %+v, then %+v", got, again)
		}
	})
}
