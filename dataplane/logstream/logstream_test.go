package logstream

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/admin"
)

func TestNCSACombined(t *testing.T) {
	r := &Record{Start: time.Date(2026, 12, 1, 16, 4, 5, 0, time.FixedZone("", 3600)), Client: "192.0.2.7", Method: "GET",
		Path: "/img/a.png?x=1", Proto: "HTTP/1.1", Status: 200, Bytes: 1234, Referer: "https://www.example.com/", UserAgent: `curl/8.5 "x"`}
	want := `192.0.2.7 - - [01/Dec/2026:16:04:05 +0100] "GET /img/a.png?x=1 HTTP/1.1" 200 1234 "https://www.example.com/" "curl/8.5 \"x\""`
	if got := r.NCSA(); got != want {
		t.Errorf("NCSA:\n got %s\nwant %s", got, want)
	}
	r.Bytes, r.Referer, r.UserAgent = 0, "", ""
	if got := r.NCSA(); got != `192.0.2.7 - - [01/Dec/2026:16:04:05 +0100] "GET /img/a.png?x=1 HTTP/1.1" 200 - "-" "-"` {
		t.Errorf("NCSA without bytes, referer and agent: %s", got)
	}
}

func TestFiltersRatesAndBounds(t *testing.T) {
	var h Hub
	h.now = func() time.Time { return time.Unix(1000, 0) } // one second for the rate
	if h.Active() {
		t.Fatal("active with no stream")
	}
	f, err := admin.ParseLogFilter(url.Values{"status": {"5xx"}, "host": {"Shop.Example"}, "min_duration": {"10ms"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.Open(f, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Record{
		{Host: "shop.example:8080", Status: 503, DurationMS: 20},
		{Host: "shop.example", Status: 200, DurationMS: 20}, // not 5xx
		{Host: "other.example", Status: 502, DurationMS: 20},
		{Host: "shop.example", Status: 500, DurationMS: 5}, // too quick
		{Host: "shop.example", Status: 500, DurationMS: 50},
		{Host: "shop.example", Status: 504, DurationMS: 50},
		{Host: "shop.example", Status: 502, DurationMS: 50}, // over the rate of 3 a second
	} {
		h.Publish(r)
	}
	if len(s.C) != 3 || s.Dropped.Load() != 1 {
		t.Fatalf("%d records queued, %d dropped; want 3 and 1", len(s.C), s.Dropped.Load())
	}
	for i := range MaxStreams - 1 {
		if _, err := h.Open(admin.LogFilter{}, 0); err != nil {
			t.Fatalf("stream %d: %v", i+2, err)
		}
	}
	if _, err := h.Open(admin.LogFilter{}, 0); err != ErrTooMany {
		t.Fatalf("stream %d: %v, want ErrTooMany", MaxStreams+1, err)
	}
	h.Shutdown()
	select {
	case <-h.Done():
	default:
		t.Fatal("Done not closed after Shutdown")
	}
	for _, bad := range []url.Values{{"status": {"7xx"}}, {"status": {"abc"}}, {"min_duration": {"soon"}}, {"path_prefix": {"img"}}} {
		if _, err := admin.ParseLogFilter(bad); err == nil {
			t.Errorf("filter %v accepted", bad)
		}
	}
}

// TestFullStreams: a stream that asks for full records, or whose filter
// reads what only they carry, makes the hub ask for them (FullActive)
// while it is open; a plain stream's lines leave the full part out.
func TestFullStreams(t *testing.T) {
	var h Hub
	plainF, _ := admin.ParseLogFilter(url.Values{"q": {"status >= 500"}})
	headerF, _ := admin.ParseLogFilter(url.Values{"q": {`req.User-Agent ~ "curl"`}})
	fullF, _ := admin.ParseLogFilter(url.Values{"full": {"1"}})
	plain, _ := h.Open(plainF, 0)
	if h.FullActive() || plain.Full() {
		t.Fatal("a plain stream asks for full records")
	}
	byHeader, _ := h.Open(headerF, 0)
	full, _ := h.Open(fullF, 0)
	if !h.FullActive() || !byHeader.Full() || !full.Full() {
		t.Fatal("a stream filtering by a header, or asking for full records, does not get them")
	}
	h.Close(byHeader)
	h.Close(full)
	if h.FullActive() {
		t.Fatal("full records asked for after the full streams closed")
	}
	r := &Record{Status: 503, Full: &admin.LogDetail{Request: map[string][]string{"User-Agent": {"curl/8"}}}}
	if l := string(Line(r, false, false)); strings.Contains(l, `"full"`) {
		t.Fatalf("a plain stream's line: %s", l)
	}
	if l := string(Line(r, false, true)); !strings.Contains(l, `"full":{"request":{"User-Agent":["curl/8"]}`) {
		t.Fatalf("a full stream's line: %s", l)
	}
	if r.Full == nil {
		t.Fatal("a plain line took the shared record's full part")
	}
}
