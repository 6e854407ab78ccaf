package controlplane

import "testing"

// A purge URL is spelled as a node keys the request for it: a raw path's
// escapes kept (its %2F, beside bytes outside ASCII, which are escaped),
// not the path url.URL.EscapedPath falls back to once the raw path holds
// such a byte (/a/b/caf%C3%A9), which names another object.
func TestAPurgeURLKeepsTheEscapesOfARawPath(t *testing.T) {
	for in, want := range map[string]string{
		"http://Example.com/a%2Fb/caf\u00e9":          "http://example.com/a%2Fb/caf%C3%A9",
		"http://example.com/a%2fb/caf%c3%a9?q=\u00e9": "http://example.com/a%2Fb/caf%C3%A9?q=%C3%A9",
		"http://example.com/caf\u00e9":                "http://example.com/caf%C3%A9",
		"http://example.com/%7Euser":                  "http://example.com/~user",
	} {
		got, err := normalizePurgeURL(in)
		if err != nil || got != want {
			t.Errorf("normalizePurgeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
