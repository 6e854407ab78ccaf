package hotkey

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A node's answer to a peer keeps within what the peer's Decode takes: the
// keys that would take it past MaxListBytes are left out (the hottest kept),
// and it decodes whole.
func TestEncodeKeepsAListWithinWhatDecodeTakes(t *testing.T) {
	long := strings.Repeat("p", 60<<10) // a URL as long as a client's header allows
	var keys []*Key
	for i := range ListMax + 10 {
		keys = append(keys, &Key{Key: fmt.Sprintf("httpwww.example.com/%d%s", i, long), Host: "www.example.com",
			URI: fmt.Sprintf("/%d%s", i, long), Rate: float64(ListMax - i)})
	}
	var b bytes.Buffer
	if err := Encode(&b, keys); err != nil {
		t.Fatal(err)
	}
	if b.Len() > MaxListBytes {
		t.Fatalf("encoded %d bytes, past MaxListBytes %d", b.Len(), MaxListBytes)
	}
	got, err := Decode(&b)
	if err != nil {
		t.Fatalf("decoding what Encode wrote: %v", err)
	}
	if len(got) == 0 || got[0].Key != keys[0].Key || len(got) >= ListMax {
		t.Fatalf("decoded %d keys, the first %.40q; want the hottest first, fewer than %d", len(got), got[0].Key, ListMax)
	}

	// Past the bound, Decode refuses with ErrListTooLong.
	var over bytes.Buffer
	over.WriteString("[")
	for i := range ListMax + 1 {
		if i > 0 {
			over.WriteString(",")
		}
		over.WriteString(`{"key":"k"}`)
	}
	over.WriteString("]")
	if _, err := Decode(&over); !errors.Is(err, ErrListTooLong) {
		t.Fatalf("a list of %d keys: %v, want ErrListTooLong", ListMax+1, err)
	}
}

// A list Encode writes is taken by Decode at every length up to the bound:
// the comma between two keys counts. A list that, with its comma, came to
// MaxListBytes+1 bytes was written by Encode and refused whole by the peer,
// so that one ring change's pre-copy of every hot key was lost.
func TestEncodeCountsTheCommaAtTheBound(t *testing.T) {
	first := &Key{Key: "k1", Host: "www.example.com", URI: "/1", Rate: 2}
	b1, _ := json.Marshal(first)
	second := &Key{Key: "k2", Host: "www.example.com", Rate: 1}
	b2, _ := json.Marshal(second)
	// "[" + first + second + "]\n" is exactly MaxListBytes: the check
	// Encode made, leaving the comma out.
	second.URI = "/" + strings.Repeat("p", MaxListBytes-3-len(b1)-len(b2)-1)
	if b2, _ = json.Marshal(second); 1+len(b1)+len(b2)+2 != MaxListBytes {
		t.Fatalf("setup: %d bytes", 1+len(b1)+len(b2)+2)
	}
	var b bytes.Buffer
	if err := Encode(&b, []*Key{first, second}); err != nil {
		t.Fatal(err)
	}
	if b.Len() > MaxListBytes {
		t.Errorf("encoded %d bytes, past MaxListBytes %d", b.Len(), MaxListBytes)
	}
	got, err := Decode(&b)
	if err != nil {
		t.Fatalf("decoding what Encode wrote: %v", err)
	}
	if len(got) == 0 || got[0].Key != "k1" {
		t.Fatalf("decoded %d keys; want the hottest first", len(got))
	}
}
