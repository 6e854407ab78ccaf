package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/gcheadroom"
	"github.com/shardcache/shardcache/cmd/internal/secret"
	"github.com/shardcache/shardcache/cmd/internal/telemetry"
	"github.com/shardcache/shardcache/cmd/internal/tlsfiles"
	"github.com/shardcache/shardcache/cmd/internal/units"
	"github.com/shardcache/shardcache/dataplane"
)

type nodeOptions struct {
	cfg                           dataplane.Config
	log                           logOptions
	access                        accessLogOptions
	controlCA                     string
	joinTokenFile, adminTokenFile string
	opsTokenFile                  string
	diskSync                      string // --disk-sync: none or data
}

func newNodeCommand() *cobra.Command {
	o := &nodeOptions{}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a cache node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := o.log.logger()
			if err != nil {
				return err
			}
			o.cfg.Logger = logger
			switch o.diskSync {
			case "none":
			case "data":
				o.cfg.DiskSync = true
			default:
				return fmt.Errorf("--disk-sync %q: want none or data", o.diskSync)
			}
			if o.cfg.ID == "" {
				// A StatefulSet pod's host name is its stable name, so a
				// restarted pod keeps its keys.
				if o.cfg.ID, err = os.Hostname(); err != nil {
					return fmt.Errorf("no --id and no host name: %w", err)
				}
				// A host name compares without case; an id is lower case.
				o.cfg.ID = strings.ToLower(strings.TrimRight(o.cfg.ID, "."))
			}
			if o.cfg.ControlPlaneTLS, err = tlsfiles.Client(o.controlCA, "", ""); err != nil {
				return fmt.Errorf("--control-plane-ca: %w", err)
			}
			if o.cfg.JoinToken, err = secret.Resolve("join-token", o.cfg.JoinToken, o.joinTokenFile, "SHARDCACHE_JOIN_TOKEN"); err != nil {
				return err
			}
			if o.cfg.OpsToken, err = secret.Resolve("ops-token", o.cfg.OpsToken, o.opsTokenFile, "SHARDCACHE_OPS_TOKEN"); err != nil {
				return err
			}
			if o.cfg.AdminToken, err = secret.Resolve("admin-token", o.cfg.AdminToken, o.adminTokenFile, "SHARDCACHE_TOKEN"); err != nil {
				return err
			}
			access, closeAccess, err := o.access.open()
			if err != nil {
				return err
			}
			defer closeAccess()
			o.cfg.AccessLog, o.cfg.AccessLogSample = access, o.access.sample
			tp, stopTracing, err := telemetry.Tracing(cmd.Context(), "shardcache-node", o.cfg.ID)
			if err != nil {
				return err
			}
			defer stopTracing()
			o.cfg.TracerProvider = tp
			n, err := dataplane.New(o.cfg)
			if err != nil {
				return err
			}
			// The heap may grow to the memory budget before the
			// collector runs (gcheadroom), unless GOGC says otherwise.
			if _, set := os.LookupEnv("GOGC"); !set {
				defer gcheadroom.Keep(uint64(n.MemoryBudget()), nil)()
			}
			return n.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.ID, "id", "", "stable node id hashed by the ring (default the host name: a StatefulSet pod's name)")
	f.StringVar(&o.cfg.ClientAddr, "client", "127.0.0.1:8081", "client HTTP listen address")
	f.StringVar(&o.cfg.PeerAddr, "peer", "127.0.0.1:9081", "peer listen address (relayed requests)")
	f.StringVar(&o.cfg.OpsAddr, "ops", "127.0.0.1:9191", "ops listen address (/healthz, /readyz, /metrics open; /stats, /inspect, /log with the admin or ops token; /drain and pprof with the admin token)")
	f.StringVar(&o.cfg.AdvertisePeerAddr, "advertise-peer", "", "peer address other nodes dial (default --peer)")
	f.StringVar(&o.cfg.PublicURL, "public-url", "", "client-facing base URL (default http://<client>)")
	f.StringVar(&o.cfg.OpsURL, "ops-url", "", "the ops listener's base URL as cachectl reaches it, for live stats and inspect (default http://<ops>)")
	f.StringVar(&o.cfg.Zone, "zone", "", "failure domain of this node")
	f.Uint32Var(&o.cfg.Weight, "weight", 1, "relative share of keys")
	f.StringVar(&o.cfg.ControlPlane, "control-plane", "127.0.0.1:7070", "control-plane address (host:port)")
	f.StringVar(&o.cfg.Origin, "origin", "", "origin base URL, e.g. http://127.0.0.1:8090")
	f.StringVar(&o.cfg.PeerTLS.CertFile, "peer-cert", "", "certificate naming this node's id, for mutual TLS on the peer hop")
	f.StringVar(&o.cfg.PeerTLS.KeyFile, "peer-key", "", "key of --peer-cert")
	f.StringVar(&o.cfg.PeerTLS.CAFile, "peer-ca", "", "cluster CA that signs every node's peer certificate")
	f.BoolVar(&o.cfg.PeerCertsFromControlPlane, "peer-certs-from-control-plane", false, "mutual TLS on the peer hop with certificates the control plane (--ca) issues and renews")
	f.BoolVar(&o.cfg.InsecurePeerHop, "insecure-peer-hop", false, "accept unauthenticated peers (h2c) on a peer listener that is not on a loopback address: whoever reaches it can fill the cache")
	f.StringVar(&o.controlCA, "control-plane-ca", "", "CA of the control plane's TLS certificate (enables TLS to it)")
	f.BoolVar(&o.cfg.InsecureControlPlane, "insecure-control-plane", false, "connect without TLS to a control plane that is not on a loopback address: the tokens and the node's certificate cross the network in cleartext")
	f.StringVar(&o.cfg.JoinToken, "join-token", "", "secret the control plane requires to join (prefer --join-token-file; default $SHARDCACHE_JOIN_TOKEN)")
	f.StringVar(&o.joinTokenFile, "join-token-file", "", "file holding the join token (a mounted secret)")
	f.Var(units.Value{N: &o.cfg.MemoryBytes}, "memory", "memory budget for cached objects, hot copies included (default 256MiB)")
	f.Var(units.Value{N: &o.cfg.MemoryMaxObject}, "memory-max-object", "largest object kept in the memory tier; larger ones are served from disk (default 1MiB)")
	f.Var(units.Value{N: &o.cfg.DiskBytes}, "disk", "disk tier budget under --data-dir (default 10GiB)")
	f.StringVar(&o.diskSync, "disk-sync", "none", "none: write buffers go to the kernel unsynced (a power failure may lose the last seconds' objects); data: each flushed buffer is fdatasynced before its fills are committed")
	f.Var(units.Value{N: &o.cfg.DiskMinFree}, "disk-min-free", "free space kept on the data directory's file system; below it nothing new is stored (default 1GiB)")
	f.Var(units.Value{N: &o.cfg.MaxObjectBytes}, "max-object", "largest response stored; larger ones are streamed unstored (default disk/4)")
	f.DurationVar(&o.cfg.OriginTimeout, "origin-timeout", 0, "timeout of one origin request (default 60s)")
	f.DurationVar(&o.cfg.ClientHeaderTimeout, "client-header-timeout", 0, "how long a client may take to send a request's header (default 10s)")
	f.DurationVar(&o.cfg.ClientSendTimeout, "client-send-timeout", 0, "close a client connection that has taken no byte of an answer for this long, as nginx's send_timeout; a peer-hop HTTP/2 stream is reset after this plus the relay timeout (default 60s; negative: never)")
	f.DurationVar(&o.cfg.ClientBodyTimeout, "client-body-timeout", 0, "fail a request whose body brings no byte for this long, as nginx's client_body_timeout (default 60s; negative: never)")
	f.IntVar(&o.cfg.PeerMaxConnsPerAddr, "peer-max-conns-per-addr", 0, "open peer-listener connections one address may hold (nodes sharing an address, or behind a sidecar proxy presenting every peer from one, share it); more are closed at once (default 8192; negative: no bound)")
	f.IntVar(&o.cfg.ClientMaxConnsPerAddr, "client-max-conns-per-addr", 0, "open client connections one address may hold (--trusted-proxies are not bounded); more are answered 503 (default 1024; negative: no bound)")
	f.DurationVar(&o.cfg.CutOffBound, "cut-off-revalidate-after", 0, "cut off from the control plane this long, the node revalidates with the origin what it stored longer ago than this before serving it, as a purge may have been missed (default 30s; negative: never)")
	f.DurationVar(&o.cfg.HandoffWindow, "handoff-window", 0, "after a ring change, how long a new owner asks a key's previous owner before the origin (default 10m; negative: off)")
	f.DurationVar(&o.cfg.DrainGrace, "drain-grace", 0, "on stop, how long the node, out of the ring, keeps serving its peers' handoff requests; it stops after 1s without one (default 10s; negative: stop at once)")
	f.IntVar(&o.cfg.HotThreshold, "hot-threshold", 0, "requests per minute at this node above which a key is hot (default 60; negative: off)")
	f.Var(units.Value{N: &o.cfg.HotCopyBytes}, "hot-copy-memory", "part of --memory kept for copies of hot objects owned elsewhere (default memory/8)")
	f.StringVar(&o.cfg.DataDir, "data-dir", "", "directory of the node's persistent data, the disk tier among it (default: a temporary directory removed on exit)")
	f.Var(prefixList{&o.cfg.TrustedProxies}, "trusted-proxies", "CIDRs of proxies whose X-Forwarded-For, Forwarded, X-Real-IP and traceparent are kept, e.g. 10.0.0.0/8,192.168.1.7")
	f.Var(prefixList{&o.cfg.PurgeAllow}, "purge-allow", "CIDRs whose PURGE requests need no token (they use --admin-token), e.g. 10.0.0.0/8")
	f.StringVar(&o.cfg.AdminToken, "admin-token", "", "control plane's admin token, for PURGE requests from --purge-allow and for the ops listener's /drain, pprof and operator views (prefer --admin-token-file; default $SHARDCACHE_TOKEN)")
	f.StringVar(&o.cfg.OpsToken, "ops-token", "", "read-only token for the ops listener's /stats, /inspect and /log (prefer --ops-token-file; default $SHARDCACHE_OPS_TOKEN)")
	f.StringVar(&o.opsTokenFile, "ops-token-file", "", "file holding the ops token (a mounted secret)")
	f.BoolVar(&o.cfg.OpsTrustLoopback, "ops-trust-loopback", false, "serve the ops listener's guarded endpoints to loopback callers without a token (a sidecar proxy's connections come from loopback too)")
	f.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the admin token (a mounted secret)")
	o.access.register(cmd, "stdout")
	o.log.register(cmd)
	return cmd
}
