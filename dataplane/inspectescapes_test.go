package dataplane

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// /inspect finds what a URL's request stored, whatever spelling of the
// URL the operator gives: its query's bytes outside ASCII, and a raw
// path's escapes, spelled as the node spells a request's on arrival
// (they are keyed escaped since cfdc53c). /inspect built its key from the
// URL as given, so an object stored for ?q=café, or for /a%2Fb/café,
// was not found at the URL it was requested by.
func TestInspectFindsAURLStoredWithItsEscapesSpelledAsOnArrival(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.OpsTrustLoopback = true })
	for _, target := range []string{"/search?q=caf\u00e9", "/a%2Fb/caf\u00e9", "/search?q=caf%c3%a9&x=%7e"} {
		rawGet(t, n.ClientAddr().String(), target, "shop.example")
		var inspect string
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			// The fill is committed once the answer has gone.
			if _, inspect = do(t, "GET", "http://"+n.OpsAddr().String()+"/inspect?"+url.Values{"url": {"http://shop.example" + target}}.Encode()); strings.Contains(inspect, `"objects":[{`) {
				break
			}
		}
		if !strings.Contains(inspect, `"objects":[{`) {
			t.Errorf("/inspect of http://shop.example%s, requested and stored: %s", target, inspect)
		}
	}
}
