package store

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeMeta feeds arbitrary bytes to the record-metadata decoder: it
// must refuse them or return an entry that encodes and decodes to itself,
// and never panic or allocate past the metadata's own size.
func FuzzDecodeMeta(f *testing.F) {
	e := &Entry{Key: "httpexample.com/a?b=1", URL: "example.com/a?b=1", Status: 200, Coding: "zstd",
		Header:   http.Header{"Content-Type": {"text/plain"}, "Etag": {`"v1"`}, "Vary": {"Accept-Encoding", "Origin"}},
		Received: time.Unix(1700000000, 5), InitialAge: time.Second, Lifetime: time.Hour}
	f.Add(encodeMeta(e))
	f.Add(encodeMeta(&Entry{Key: "k", Header: http.Header{}}))
	b := encodeMeta(e)
	f.Add(b[:len(b)-1]) // cut short
	f.Add([]byte(recordMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeMeta(b)
		if err != nil {
			if got != nil {
				t.Fatalf("an entry with error %v", err)
			}
			return
		}
		again, err := decodeMeta(encodeMeta(got))
		if err != nil {
			t.Fatalf("a decoded entry does not decode once encoded again: %v", err)
		}
		if again.Key != got.Key || again.URL != got.URL || again.Status != got.Status || !again.Received.Equal(got.Received) ||
			again.InitialAge != got.InitialAge || again.Lifetime != got.Lifetime || again.Coding != got.Coding ||
			!reflect.DeepEqual(again.Header, got.Header) {
			t.Fatalf("round trip changed the entry: %+v, then %+v", got, again)
		}
	})
}

// FuzzParsePrefix: a record prefix either parses to lengths that fit its
// units, or is refused; it never panics.
func FuzzParsePrefix(f *testing.F) {
	meta := encodeMeta(&Entry{Key: "k", Header: http.Header{}})
	f.Add(objectRecord(7, meta, []byte("body"), 4)[:prefixLen])
	f.Add(smallRecord(kindTombstone, 7, 42, nil)[:prefixLen])
	f.Add(make([]byte, prefixLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePrefix(b)
		if err != nil {
			return
		}
		if int64(p.units)*unit < prefixLen+int64(p.metaLen)+p.size || p.size < 0 || p.metaLen > maxMetaLen {
			t.Fatalf("a prefix that does not fit its units parsed: %+v", p)
		}
	})
}
