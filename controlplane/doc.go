// Package controlplane is shardcache's control plane: a gRPC server that keeps
// members, ring epochs, policies and purges in etcd and pushes them to every
// cache node over the node's Session stream.
//
// State lives in etcd under one prefix (Config.Prefix):
//
//	sessions/<id>     the instance holding the node's session, bound to the
//	                  lease of the session's replica (one per replica)
//	members/<id>      Member, bound to the same lease
//	status/<id>       the node's last load report, bound to the same lease
//	epochs/current    the current RingEpoch
//	epochs/<n>        the last Config.EpochsKept epochs, by number
//	leader/           the election of the replica that writes epochs
//
// Any number of replicas can run against one etcd. Every replica serves
// sessions and admin reads; one replica, elected with etcd's concurrency
// package, turns membership changes into new epochs. Changes that arrive
// within Config.EpochBatchWindow become one epoch, and the epoch is written
// with a compare-and-swap on the previous one, so two leaders can never both
// write the same epoch number.
//
// When no etcd endpoints are configured, the server starts an embedded etcd
// (go.etcd.io/etcd/server/v3/embed) in Config.EmbeddedEtcd.Dir.
package controlplane
