package dataplane

import (
	"net/http"

	"github.com/shardcache/shardcache/dataplane/internal/tracing"
	"github.com/shardcache/shardcache/dataplane/registry"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/warm"
)

// The parts of a node that only mirror policies (policies with
// registries) use.

// registryClient is the client of mirror policies' upstream registries.
func (n *Node) registryClient() *registry.Client {
	return registry.NewClient(registry.Config{
		Via:           routes.Via(n.cfg.ID, n.cfg.AdvertisePeerAddr),
		HeaderTimeout: n.cfg.OriginTimeout,
		Wrap: func(rt http.RoundTripper) http.RoundTripper {
			return tracing.Transport(n.cfg.TracerProvider, rt, "registry")
		},
		Logger: n.log,
	})
}

// warmer serves the ops listener's POST /warm: it asks for an image's
// manifests and blobs through the node's own client listener, as a pull
// would, so that each is filled at its owner.
func (n *Node) warmer() *warm.Warmer {
	return warm.New(warm.Config{Node: n.cfg.ID, Base: "http://" + n.ClientAddr().String(), Policies: &n.policies})
}
