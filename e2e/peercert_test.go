package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

// TestPeerCertificatesRenewWithoutFailures runs a dev cluster whose peer
// hop is mutual TLS with 3-second certificates from the control plane, and
// relays requests until every node has renewed its certificate twice: no
// request fails and no relay falls back.
func TestPeerCertificatesRenewWithoutFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	origin := &countingOrigin{counts: map[string]int{}}
	osrv := httptest.NewServer(origin)
	defer osrv.Close()
	off := devPortOffset(t)
	startDev(t, ctx, "--origin", osrv.URL, "--port-offset", off, "--peer-cert-ttl", "3s")
	nodes := []*node{devNode(off, 1), devNode(off, 2), devNode(off, 3)}
	rg, err := ring.New(1, []ring.Member{{ID: "node-1"}, {ID: "node-2"}, {ID: "node-3"}})
	if err != nil {
		t.Fatal(err)
	}
	// Keys owned elsewhere than the node they are sent to: every request
	// is relayed over mutual TLS.
	type target struct {
		via  *node
		path string
	}
	var targets []target
	for i := 0; len(targets) < 30; i++ {
		path := fmt.Sprintf("/obj/cert-%d?size=100", i)
		owner := rg.Owner("http127.0.0.1" + path).ID
		for _, nd := range nodes {
			if nd.id != owner {
				targets = append(targets, target{nd, path})
				break
			}
		}
	}
	installed := func() float64 {
		least := -1.0
		for _, nd := range nodes {
			v := metric(t, nd, "shardcache_peer_certificates_total", `result="installed"`)
			if least < 0 || v < least {
				least = v
			}
		}
		return least
	}
	client := &http.Client{}
	requests := 0
	deadline := time.Now().Add(60 * time.Second)
	for installed() < 3 { // the first certificate and two renewals, at least
		if time.Now().After(deadline) {
			t.Fatalf("certificates installed per node: %v after 60s; want 3", installed())
		}
		for _, tg := range targets {
			if _, err := get(client, tg.via, tg.path, 100); err != nil {
				t.Fatalf("request %d failed during certificate renewal: %v", requests, err)
			}
			requests++
		}
	}
	for _, nd := range nodes {
		if v := metric(t, nd, "shardcache_relay_fallbacks_total"); v != 0 {
			t.Fatalf("%s fell back from %v relays", nd.id, v)
		}
		if v := metric(t, nd, "shardcache_peer_requests_total", `result="error"`); v != 0 {
			t.Fatalf("%s had %v failed relays", nd.id, v)
		}
		if v := metric(t, nd, "shardcache_peer_certificates_total", `result="refused"`); v != 0 {
			t.Fatalf("%s refused %v certificates", nd.id, v)
		}
	}
	t.Logf("%d relayed requests over mutual TLS across %v certificate installs per node, none failed", requests, installed())
}
