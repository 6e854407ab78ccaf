package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// The hot-key list a node answers any member with (for pre-copy) is the
// keys its own clients asked for: a key that holds a client's credential,
// a cookie or API key a policy keys on, or a credential in the query,
// would hand it to every member, which the client never reached. Those
// keys are left out of the list (handoff still moves them when asked for);
// keys of the URL alone stay in it.
func TestAPeersHotKeyListHoldsNoClientsCredential(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL, func(c *Config) { c.HotThreshold = 1 })
	set := &pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{
		{Name: "per-client", PathPrefix: "/api/", KeyTemplate: "$scheme$host$request_uri|$http_x_api_key|$cookie_sid"},
		{Name: "all", PathPrefix: "/"},
	}}
	if err := n.ApplyPolicies(set); err != nil {
		t.Fatal(err)
	}
	client := "http://" + n.ClientAddr().String()
	for range 20 {
		do(t, "GET", client+"/api/items", "X-Api-Key", "apikey-s3cret", "Cookie", "sid=sess-s3cret")
		do(t, "GET", client+"/img/logo.png?token=query-s3cret")
		do(t, "GET", client+"/img/plain.png")
	}
	h2c := &http.Client{Transport: &http.Transport{Protocols: relay.Protocols(false)}}
	req, _ := http.NewRequest("GET", "http://"+n.PeerAddr().String()+"/", nil)
	req.Header = hop.ControlHeader("b", hop.HotKeysField, "100")
	resp, err := h2c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	list := string(b)
	if resp.StatusCode != 200 || !strings.Contains(list, "/img/plain.png") {
		t.Fatalf("hot-key list: %d %s; want /img/plain.png listed", resp.StatusCode, list)
	}
	for _, secret := range []string{"apikey-s3cret", "sess-s3cret", "query-s3cret"} {
		if strings.Contains(list, secret) {
			t.Errorf("a peer's hot-key list holds a client's %s: %s", secret, list)
		}
	}
}
