package httpcache

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestStorable(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		h          http.Header
		want       bool
		authorized bool
		o          Overrides
	}{
		{"plain 200", 200, header(), true, false, Overrides{}},
		{"no-store", 200, header("Cache-Control", "no-store"), false, false, Overrides{}},
		{"private", 200, header("Cache-Control", "max-age=60, private"), false, false, Overrides{}},
		{"no-cache is stored, revalidated on use", 200, header("Cache-Control", "no-cache"), true, false, Overrides{}},
		{"vary star among others", 200, header("Vary", "Accept, *"), false, false, Overrides{}},
		{"vary star", 200, header("Vary", "*"), false, false, Overrides{}},
		{"500 without freshness", 500, header(), false, false, Overrides{}},
		{"500 with s-maxage", 500, header("Cache-Control", "s-maxage=5"), true, false, Overrides{}},
		{"404", 404, header(), true, false, Overrides{}},
		{"directive names are case-insensitive", 200, header("Cache-Control", "No-Store"), false, false, Overrides{}},
		{"206 is stored only as a slice", 206, header("Cache-Control", "max-age=60"), false, false, Overrides{}},
		{"304 is not stored", 304, header("Cache-Control", "max-age=60"), false, false, Overrides{}},
		{"1xx is not stored", 103, header("Cache-Control", "max-age=60"), false, false, Overrides{}},
		{"500 with a policy TTL", 500, header(), true, false, Overrides{TTL: true}},
		{"a status the policy excludes", 200, header("Cache-Control", "max-age=60"), false, false, Overrides{Excluded: true}},
		{"private, stored when the policy says", 200, header("Cache-Control", "private"), true, false, Overrides{StorePrivate: true}},
		{"Set-Cookie", 200, header("Cache-Control", "max-age=60", "Set-Cookie", "a=b"), false, false, Overrides{}},
		{"Set-Cookie, stored when the policy says", 200, header("Cache-Control", "max-age=60", "Set-Cookie", "a=b"), true, false, Overrides{StoreSetCookie: true}},
		{"authorized, max-age only", 200, header("Cache-Control", "max-age=60"), false, true, Overrides{}},
		{"authorized, public", 200, header("Cache-Control", "public, max-age=60"), true, true, Overrides{}},
		{"authorized, s-maxage", 200, header("Cache-Control", "s-maxage=60"), true, true, Overrides{}},
		{"authorized, must-revalidate", 200, header("Cache-Control", "max-age=60, must-revalidate"), true, true, Overrides{}},
		{"must-understand with an understood status overrides no-store", 200, header("Cache-Control", "max-age=60, no-store, must-understand"), true, false, Overrides{}},
		{"must-understand with an unknown status is not stored", 599, header("Cache-Control", "max-age=3600, no-store, must-understand"), false, false, Overrides{}},
		{"must-understand with an unknown status, without no-store", 599, header("Cache-Control", "max-age=3600, must-understand"), false, false, Overrides{}},
		{"must-understand with an unknown status, whatever the policy", 599, header("Cache-Control", "must-understand"), false, false, Overrides{TTL: true, Heuristic: true}},
		{"must-understand with an unregistered 2xx", 299, header("Cache-Control", "max-age=60, must-understand"), false, false, Overrides{}},
		{"an unknown status with max-age is stored without must-understand", 599, header("Cache-Control", "max-age=3600"), true, false, Overrides{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Storable(tt.status, tt.h, tt.authorized, tt.o); got != tt.want {
				t.Fatalf("Storable = %v, want %v", got, tt.want)
			}
			if why := Unstorable(tt.status, tt.h, tt.authorized, tt.o); why != unstorableWhy[tt.name] {
				t.Fatalf("Unstorable = %q, want %q", why, unstorableWhy[tt.name])
			}
		})
	}
}

// unstorableWhy is the reason Unstorable gives for TestStorable's cases
// that are not stored.
var unstorableWhy = map[string]string{
	"no-store": ReasonNoStore, "private": ReasonPrivate, "vary star among others": ReasonVaryStar, "vary star": ReasonVaryStar,
	"500 without freshness": ReasonStatus, "directive names are case-insensitive": ReasonNoStore,
	"206 is stored only as a slice": ReasonStatus, "304 is not stored": ReasonStatus, "1xx is not stored": ReasonStatus,
	"a status the policy excludes":                         ReasonExcluded,
	"must-understand with an unknown status is not stored": ReasonMustUnderstand, "must-understand with an unknown status, without no-store": ReasonMustUnderstand,
	"must-understand with an unknown status, whatever the policy": ReasonMustUnderstand, "must-understand with an unregistered 2xx": ReasonMustUnderstand, "Set-Cookie": ReasonSetCookie, "authorized, max-age only": ReasonAuthorization,
}

func TestLifetime(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	date := now.Format(http.TimeFormat)
	tests := []struct {
		name   string
		status int
		h      http.Header
		want   time.Duration
	}{
		{"s-maxage wins over max-age", 200, header("Cache-Control", "max-age=10, s-maxage=20"), 20 * time.Second},
		{"max-age", 200, header("Cache-Control", "public, max-age=3600"), time.Hour},
		{"first max-age wins", 200, header("Cache-Control", "max-age=5", "Cache-Control", "max-age=9"), 5 * time.Second},
		{"invalid max-age ignored", 200, header("Cache-Control", "max-age=abc"), 0},
		{"invalid max-age is stale despite Expires", 200, header("Cache-Control", "max-age=1x", "Date", date, "Expires", now.Add(time.Hour).Format(http.TimeFormat)), 0},
		{"negative max-age is stale", 200, header("Cache-Control", "max-age=-5"), 0},
		{"no-cache lifetime is zero", 200, header("Cache-Control", "no-cache, max-age=60"), 0},
		{"expires minus date", 200, header("Date", date, "Expires", now.Add(time.Minute).Format(http.TimeFormat)), time.Minute},
		{"invalid expires is expired", 200, header("Date", date, "Expires", "0"), 0},
		{"heuristic 10% of last-modified", 200, header("Date", date, "Last-Modified", now.Add(-100*time.Minute).Format(http.TimeFormat)), 10 * time.Minute},
		{"no heuristic for 500", 500, header("Date", date, "Last-Modified", now.Add(-100*time.Minute).Format(http.TimeFormat)), 0},
		{"nothing", 200, header(), 0},
		{"huge max-age capped", 200, header("Cache-Control", "max-age=99999999999"), time.Duration(1<<31-1) * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Lifetime(tt.status, tt.h, now); got != tt.want {
				t.Fatalf("Lifetime = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestInitialAge(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if got := InitialAge(header("Age", "30"), now.Add(-2*time.Second), now); got != 32*time.Second {
		t.Fatalf("Age header: %s", got)
	}
	if got := InitialAge(header("Age", "-5"), now, now); got != 0 {
		t.Fatalf("negative Age: %s", got)
	}
	if got := InitialAge(header("Date", now.Add(-time.Minute).Format(http.TimeFormat), "Age", "5"), now, now); got != time.Minute {
		t.Fatalf("Date older than Age: %s", got)
	}
	// RFC 9111 5.1: a list-based Age counts by its first member; an
	// invalid one (after discarding the rest) is ignored.
	for _, tt := range []struct {
		lines []string
		want  time.Duration
	}{
		{[]string{"7200, 0"}, 7200 * time.Second},
		{[]string{"0, 7200"}, 0},
		{[]string{"7200", "0"}, 7200 * time.Second},
		{[]string{" , 30 ,"}, 30 * time.Second},
		{[]string{"30, x"}, 30 * time.Second},
		{[]string{"x, 30"}, 0},
		{[]string{"100s"}, 0},
		{[]string{"100;x=1"}, 0},
		{[]string{""}, 0},
	} {
		h := http.Header{"Age": tt.lines}
		if got := InitialAge(h, now, now); got != tt.want {
			t.Errorf("Age %q: %s, want %s", tt.lines, got, tt.want)
		}
	}
}

// FuzzParseCacheControl: any field value parses without panicking, into
// lower-case trimmed names, and delta-seconds are never negative or past
// 2^31 seconds.
func FuzzParseCacheControl(f *testing.F) {
	for _, s := range []string{"max-age=60, public", `s-maxage="10", no-cache="Set-Cookie"`, "max-age=99999999999999999999",
		"MAX-AGE = 5 ,, private", "max-age=-1", "stale-while-revalidate=30,max-age=0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := http.Header{"Cache-Control": {s}}
		d := ParseCacheControl(h)
		for name := range d {
			if name != strings.ToLower(strings.TrimSpace(name)) {
				t.Fatalf("directive name %q not normalised", name)
			}
			if v, ok := d.Seconds(name); ok && (v < 0 || v > (1<<31-1)*time.Second) {
				t.Fatalf("%s: %s out of range", name, v)
			}
		}
		now := time.Unix(1700000000, 0)
		if l := Lifetime(200, h, now); l < 0 {
			t.Fatalf("negative lifetime %s", l)
		}
		ForRequest(h)
		Forbidden(h, false)
	})
}

// Accept-Language values that ask the same select the same variant: case,
// spaces, the order of equal weights and the spelling of q do not matter;
// weight 0 and malformed ranges drop out.
func TestAcceptLanguageIsNormalised(t *testing.T) {
	key := func(v ...string) string {
		return VariantKey("k", []string{"accept-language"}, http.Header{"Accept-Language": v})
	}
	same := [][]string{
		{"en-US, fr;q=0.5"},
		{"fr ; q=0.50,EN-us"},
		{"en-us", "fr;q=0.500"},
		{"en-us, fr;q=0.5, de;q=0"},
		{"en-us, fr;q=0.5, x y;q=0.9, it;q=2"},
	}
	for _, v := range same[1:] {
		if key(v...) != key(same[0]...) {
			t.Errorf("Accept-Language %q selects another variant than %q", v, same[0])
		}
	}
	if key("de, fr") != key("fr, de") {
		t.Error("the order of equal weights selects another variant")
	}
	if key("fr, de;q=0.9") == key("de, fr;q=0.9") {
		t.Error("different preferences select the same variant")
	}
}

// Accept values that ask the same select the same variant: spaced,
// cased or split over lines differently (a container registry client sends
// one line per media type), a range repeated, weights written otherwise.
// Values a negotiator may answer differently select different ones: equal
// weights in another order (it may take the first), parameter values in
// another case, a range past any bound.
func TestAcceptIsNormalised(t *testing.T) {
	key := func(v ...string) string { return VariantKey("k", []string{"accept"}, http.Header{"Accept": v}) }
	oci, docker := "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"
	same := [][]string{
		{oci + ", " + docker},
		{oci + "," + docker},
		{oci, docker},
		{" " + strings.ToUpper(oci), docker, oci},
		{oci + ";q=1.0", docker + " ; q=1"},
	}
	for _, v := range same[1:] {
		if key(v...) != key(same[0]...) {
			t.Errorf("Accept %q selects another variant than %q", v, same[0])
		}
	}
	if key("a/a;q=0.5, b/b") != key("b/b, a/a;q=0.5") {
		t.Error("the same weights in another order select another variant")
	}
	different := [][2]string{
		{oci, docker},
		{oci, oci + ", " + docker},
		{"application/json, text/html", "text/html, application/json"},
		{"text/html;level=A", "text/html;level=a"},
	}
	for _, d := range different {
		if key(d[0]) == key(d[1]) {
			t.Errorf("Accept %q and %q select the same variant", d[0], d[1])
		}
	}
	many := make([]string, 100)
	for i := range many {
		many[i] = fmt.Sprintf("type/t%03d", i)
	}
	if key(many...) == key(many[:99]...) {
		t.Error("the 100th media range does not count")
	}
}

// Accept-Encoding selects a variant by what it accepts: x-gzip is gzip,
// weights and order do not matter, a coding the node does not know keeps
// a variant of its own, and a refusal is not an acceptance.
func TestAcceptEncodingIsNormalised(t *testing.T) {
	key := func(v string) string {
		return VariantKey("k", []string{"accept-encoding"}, http.Header{"Accept-Encoding": {v}})
	}
	same := [][2]string{{"gzip", "x-gzip"}, {"gzip, br", "br;q=0.5, GZIP"}}
	for _, s := range same {
		if key(s[0]) != key(s[1]) {
			t.Errorf("Accept-Encoding %q and %q select different variants", s[0], s[1])
		}
	}
	different := [][2]string{{"gzip", ""}, {"x-gzip", ""}, {"gzip", "gzip, foo"}, {"foo", ""}, {"*", "*, gzip;q=0"}, {"gzip;q=0", "gzip"}}
	for _, d := range different {
		if key(d[0]) == key(d[1]) {
			t.Errorf("Accept-Encoding %q and %q select the same variant", d[0], d[1])
		}
	}
	if !Accepts(http.Header{"Accept-Encoding": {"x-gzip"}}, "gzip") || Accepts(http.Header{"Accept-Encoding": {"x-gzip;q=0, *"}}, "gzip") {
		t.Error("x-gzip is not read as gzip")
	}
	if AcceptsAll(http.Header{}, "gzip") || !AcceptsAll(http.Header{"Accept-Encoding": {"br, gzip"}}, "gzip, br") || !AcceptsAll(http.Header{}, "identity") {
		t.Error("AcceptsAll is wrong")
	}
}
