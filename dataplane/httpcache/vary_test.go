package httpcache

import (
	"net/http"
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
