package dataplane

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A piece the origin answers shorter than asked (it caps its ranges) is not
// joined to the stored part as if it held all it was asked for: the part's
// bytes were shifted, and the client got a complete 206 of wrong bytes.
// The policy's largest object lies between the part's size and the joined
// span's, so the joined span is answered as read, not stored.
func TestAPieceShorterThanAskedIsNotJoinedAsIfWhole(t *testing.T) {
	const total, partStart = 1 << 20, 128 << 10
	obj := make([]byte, total)
	io.ReadFull(&patterned{size: total, version: 1}, obj)
	var pieces atomic.Int32
	o := &scripted{counts: map[string]int{}, handlers: map[string]func(http.ResponseWriter, *http.Request, int){
		"/parts/": func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("ETag", `"x"`)
			if r.Header.Get("If-Range") != "" { // the piece joining the part
				pieces.Add(1)
				first := int64(partStart - 100)
				if r.Header.Get("Range") != fmt.Sprintf("bytes=%d-%d", first, partStart-1) {
					t.Errorf("piece asked with Range %q", r.Header.Get("Range"))
				}
				w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, first+9, total))
				w.Header().Set("Content-Length", "10")
				w.WriteHeader(http.StatusPartialContent)
				w.Write(obj[first : first+10])
				return
			}
			http.ServeContent(w, r, "", time.Time{}, &patterned{size: total, version: 1})
		},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		// The part is stored; the part joined to the piece is over the
		// largest object, so it is answered as it is read, not stored.
		{Name: "parts", PathPrefix: "/parts/", PartialContent: true, MaxObjectSize: total - partStart + 50},
	}}); err != nil {
		t.Fatal(err)
	}
	url := "http://" + n.ClientAddr().String() + "/parts/short"
	if resp, b := do(t, "GET", url, "Range", "bytes="+strconv.Itoa(partStart)+"-"); resp.StatusCode != 206 || b != string(obj[partStart:]) {
		t.Fatalf("first range: %d, %d bytes", resp.StatusCode, len(b))
	}
	waitFor(t, "the part to be stored", func() bool {
		resp, _ := do(t, "GET", url, "Range", fmt.Sprintf("bytes=%d-%d", partStart+10, partStart+20))
		return resp.Header.Get("X-Cache") == "HIT"
	})
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", url, nil)
	lo, hi := partStart-100, partStart+99
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", lo, hi))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if pieces.Load() != 1 {
		t.Fatalf("the origin was asked for %d pieces, want 1", pieces.Load())
	}
	if rerr == nil && resp.StatusCode == http.StatusPartialContent && string(got) != string(obj[lo:hi+1]) {
		i := 0
		for i < len(got) && got[i] == obj[lo+i] {
			i++
		}
		t.Fatalf("a complete 206 (Content-Range %q, %d bytes, X-Cache %s) that is not the object's bytes %d-%d: first wrong byte at %d of the range",
			resp.Header.Get("Content-Range"), len(got), resp.Header.Get("X-Cache"), lo, hi, i)
	}
	if resp.StatusCode != http.StatusBadGateway && string(got) != string(obj[lo:hi+1]) {
		t.Fatalf("answer %d with %d bytes, want the range's bytes or a 502", resp.StatusCode, len(got))
	}
}
