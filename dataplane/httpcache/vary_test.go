package httpcache

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestPreferredLanguage(t *testing.T) {
	tests := []struct {
		al   string
		want string // "" for none
	}{
		{"de", "de"},
		{"DE-de", "de-de"},
		{"de-DE, de;q=0.9, en;q=0.5", "de-de"},
		{"en;q=0.5, fr;q=0.8", "fr"},
		{"de, fr", ""},             // a tie
		{"de;q=0.5, fr;q=0.5", ""}, // a tie at a lower weight
		{"*", ""},
		{"", ""},
		{"de;q=0", ""},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.al != "" {
			h.Set("Accept-Language", tt.al)
		}
		got, ok := PreferredLanguage(h)
		if !ok {
			got = ""
		}
		if got != tt.want {
			t.Errorf("Accept-Language %q: %q, want %q", tt.al, got, tt.want)
		}
	}
}

// TestImplicitVaryAndCompressible: a coded answer varies on
// Accept-Encoding, a registry's manifest on Accept when the policy is
// registry-aware, and the policy's vary_by fields are added; only a
// textual, uncoded, transformable body of unknown or sufficient length is
// worth compressing.
func TestImplicitVaryAndCompressible(t *testing.T) {
	manifest := httptest.NewRequest("GET", "/v2/library/app/manifests/v1", nil)
	for _, tc := range []struct {
		r      *http.Request
		h      http.Header
		varyBy []string
		aware  bool
		want   string
	}{
		{httptest.NewRequest("GET", "/a", nil), http.Header{"Content-Encoding": {"gzip"}}, nil, true, "Accept-Encoding"},
		{manifest, http.Header{"Content-Type": {"application/vnd.oci.image.index.v1+json"}}, nil, true, "Accept"},
		{manifest, http.Header{"Content-Type": {"application/vnd.oci.image.index.v1+json"}}, nil, false, ""},
		{httptest.NewRequest("GET", "/a", nil), http.Header{}, []string{"X-Tenant"}, false, "X-Tenant"},
	} {
		AddImplicitVary(tc.r, tc.h, tc.varyBy, tc.aware)
		if got := tc.h.Get("Vary"); got != tc.want {
			t.Errorf("%s %v: Vary %q, want %q", tc.r.URL.Path, tc.h, got, tc.want)
		}
	}
	for _, tc := range []struct {
		h      http.Header
		length int64
		want   bool
	}{
		{http.Header{"Content-Type": {"text/html; charset=utf-8"}}, -1, true},
		{http.Header{"Content-Type": {"application/problem+json"}}, 4096, true},
		{http.Header{"Content-Type": {"text/html"}}, MinCompress - 1, false},
		{http.Header{"Content-Type": {"text/html"}, "Content-Encoding": {"br"}}, -1, false},
		{http.Header{"Content-Type": {"text/html"}, "Cache-Control": {"max-age=60, No-Transform"}}, -1, false},
		{http.Header{"Content-Type": {"image/png"}}, -1, false},
	} {
		if got := Compressible(tc.h, tc.length); got != tc.want {
			t.Errorf("Compressible(%v, %d) = %t, want %t", tc.h, tc.length, got, tc.want)
		}
	}
}
