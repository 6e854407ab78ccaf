// Package dataplane is a shardcache cache node. A node accepts client HTTP
// on its client listener, maps each request's cache key to its owner with
// sdk/ring over the current ring epoch, and either serves it from its own
// store (route=local), relays it to the owner over a pooled HTTP/2
// connection on the owner's peer listener (route=relayed), or, when the
// request is not cacheable, forwards it straight to the origin
// (route=bypass). The owner serves from its memory tier, then its disk tier
// (package store), or fetches once from the origin: concurrent misses for a
// key collapse into one origin request, whose body every waiting client
// reads as it streams into the store.
//
// A node gets its ring epochs from the control plane over a Session stream
// (package session) and keeps serving with the last epoch it had when the
// control plane is away. Its ops listener serves /healthz, /readyz,
// /metrics and /debug/pprof/.
//
// The parts with one job live in packages below it, which never import it:
// httpcache (the pure HTTP caching rules), origin (the origin client),
// slice (the slice format and assembler), purge (bans), relay (the peer
// hop and its vocabulary), session, store, flight and hotkey. The root
// package wires them, and holds the front and the owner's read path;
// docs/architecture.md says which file does each step.
package dataplane
