package httpcache

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestParseTargetedIsAStructuredDictionary(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		want Directives // nil: invalid, ignored as a whole
	}{
		{[]string{"max-age=60"}, Directives{"max-age": "60"}},
		{[]string{"max-age=60, no-store"}, Directives{"max-age": "60", "no-store": ""}},
		{[]string{"max-age=60", "must-revalidate"}, Directives{"max-age": "60", "must-revalidate": ""}}, // field lines combine
		{[]string{`no-cache="set-cookie"`}, Directives{"no-cache": "set-cookie"}},
		{[]string{"max-age=60, x-ext=(a b);p=1, y-ext=:AAA=:"}, Directives{"max-age": "60", "x-ext": "", "y-ext": ""}},
		{[]string{"public=?0, max-age=5"}, Directives{"max-age": "5"}},    // false is absent
		{[]string{"max-age=10, max-age=20"}, Directives{"max-age": "20"}}, // the last one wins in a Dictionary
		{[]string{`max-age="60"`}, nil},                                   // a String where an Integer is due
		{[]string{"max-age=60.5"}, nil},                                   // a Decimal
		{[]string{"no-store=1"}, nil},                                     // an Integer where a Boolean is due
		{[]string{"Max-Age=60"}, nil},                                     // keys are lower case
		{[]string{"max-age=60,"}, nil},                                    // a trailing comma
		{[]string{"max-age=60;;"}, nil},
		{[]string{`no-cache="unterminated`}, nil},
		{[]string{""}, nil},
		{nil, nil},
	} {
		got, ok := ParseTargeted(tt.in)
		if tt.want == nil {
			if ok {
				t.Errorf("ParseTargeted(%q) = %v; want invalid", tt.in, got)
			}
			continue
		}
		if !ok || len(got) != len(tt.want) {
			t.Errorf("ParseTargeted(%q) = %v, %v; want %v", tt.in, got, ok, tt.want)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("ParseTargeted(%q)[%s] = %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}

// A valid targeted field replaces Cache-Control and Expires for this
// cache; an invalid one is ignored, and Cache-Control applies. The
// policy's own field comes before CDN-Cache-Control.
func TestTargetedFieldGovernsStorageAndFreshness(t *testing.T) {
	now := time.Now()
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		h        http.Header
		targeted []string
		storable bool
		lifetime time.Duration
	}{
		{"CDN-Cache-Control over Cache-Control", h("Cache-Control", "no-store", "CDN-Cache-Control", "max-age=300"), nil, true, 300 * time.Second},
		{"CDN-Cache-Control no-store", h("Cache-Control", "max-age=300", "CDN-Cache-Control", "no-store"), nil, false, 0},
		{"CDN-Cache-Control private", h("Cache-Control", "public, max-age=300", "CDN-Cache-Control", "private"), nil, false, 0},
		{"Expires ignored under a targeted field", h("Expires", now.Add(time.Hour).UTC().Format(http.TimeFormat), "CDN-Cache-Control", "must-revalidate"), nil, false, 0},
		{"an invalid targeted field is ignored", h("Cache-Control", "max-age=60", "CDN-Cache-Control", `max-age="300"`), nil, true, 60 * time.Second},
		{"the policy's own field first", h("CDN-Cache-Control", "max-age=300", "Shardcache-Cache-Control", "max-age=900"),
			[]string{"Shardcache-Cache-Control"}, true, 900 * time.Second},
		{"an invalid own field falls to CDN-Cache-Control", h("CDN-Cache-Control", "max-age=300", "Shardcache-Cache-Control", "max-age=x"),
			[]string{"Shardcache-Cache-Control"}, true, 300 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Storable(200, tt.h, false, Overrides{}, tt.targeted...) && Lifetime(200, tt.h, now, tt.targeted...) > 0; got != tt.storable {
				t.Fatalf("storable with a lifetime: %v, want %v", got, tt.storable)
			}
			if tt.storable {
				if got := Lifetime(200, tt.h, now, tt.targeted...); got != tt.lifetime {
					t.Fatalf("lifetime %s, want %s", got, tt.lifetime)
				}
			}
		})
	}
	// must-revalidate in the targeted field binds the stale rules.
	stored := h("Cache-Control", "max-age=60, stale-if-error=600", "CDN-Cache-Control", "max-age=60, must-revalidate")
	if StaleOnError(2*time.Minute, time.Minute, stored, http.Header{}, 10*time.Minute) {
		t.Fatal("stale served on error despite the targeted field's must-revalidate")
	}
}

func FuzzParseTargeted(f *testing.F) {
	for _, s := range []string{"max-age=60", `no-cache="a, b", x=(1 2);p=?1`, "a=:AB==:, b=-1.5", "max-age=60,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseTargeted([]string{v})
		if !ok {
			return
		}
		// What is accepted has the types RFC 9213 2.1 infers.
		for k, val := range d {
			switch directiveTypes[k] {
			case 'i':
				if _, err := strconv.ParseInt(val, 10, 64); err != nil {
					t.Fatalf("ParseTargeted(%q): %s=%q is no Integer", v, k, val)
				}
			case 'b':
				if val != "" {
					t.Fatalf("ParseTargeted(%q): %s=%q is no Boolean", v, k, val)
				}
			}
		}
	})
}
