// Package dataplane is a shardcache cache node. A node accepts client HTTP
// on its client listener, maps each request's cache key to its owner over
// the current ring epoch, and either serves it from its own store
// (route=local), relays it to the owner over the peer hop to
// the owner's peer listener (route=relayed), or, when the request is not
// cacheable, forwards it straight to the origin (route=bypass). The owner
// serves from its memory tier, then its disk tier, or fetches once from the
// origin: concurrent misses for a key collapse into one origin request,
// whose body every waiting client reads as it streams into the store.
//
// The root package is the Node: its Config, New and Run, the listeners,
// the ops listener (/healthz, /readyz, /metrics, /debug/pprof/), and the
// wiring of the parts below it. It applies what the control plane pushes
// over the Session stream (package session): ring epochs, policies and
// purges; a node keeps serving with what it last had when the control plane
// is away.
//
// The parts, each with one job, live in packages below it, which never
// import it: front (the two request handlers), owner (the cache: its
// stages from lookup to answer), httpcache (the pure HTTP caching rules),
// hop (the peer hop's vocabulary), origin, slice, purge, relay (the peer
// transport), routes, metrics, session, ops, logstream, store, flight and
// hotkey (the keys seen hot), and internal/h1, the client port's HTTP/1.1
// server. docs/architecture.md says which file does each step of a
// request.
package dataplane
