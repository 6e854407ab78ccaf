package main

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/secret"
	"github.com/shardcache/shardcache/cmd/internal/telemetry"
	"github.com/shardcache/shardcache/controlplane"
)

type controlOptions struct {
	cfg                           controlplane.Config
	endpoints                     string
	log                           logOptions
	joinTokenFile, adminTokenFile string
}

func newControlCommand() *cobra.Command {
	o := &controlOptions{}
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Run a control-plane replica",
		Long: `Run a control-plane replica. With --etcd-endpoints it uses an existing etcd
cluster; without, it starts an embedded etcd in --etcd-dir. The admin and join
tokens come from --admin-token-file and --join-token-file (mounted secrets), or
SHARDCACHE_TOKEN and SHARDCACHE_JOIN_TOKEN.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.ListenAddr, "listen", "127.0.0.1:7070", "gRPC listen address (host:port)")
	f.StringVar(&o.endpoints, "etcd-endpoints", "", "comma-separated etcd client URLs; empty starts an embedded etcd")
	f.StringVar(&o.cfg.EmbeddedEtcd.Dir, "etcd-dir", "", "data directory of the embedded etcd")
	f.StringVar(&o.cfg.EmbeddedEtcd.ClientURL, "etcd-client-url", "http://127.0.0.1:2379", "client URL of the embedded etcd")
	f.StringVar(&o.cfg.EmbeddedEtcd.PeerURL, "etcd-peer-url", "http://127.0.0.1:2380", "peer URL of the embedded etcd")
	f.StringVar(&o.cfg.Prefix, "prefix", "/shardcache/", "etcd key prefix of all shardcache state")
	f.StringVar(&o.cfg.ReplicaID, "replica-id", "", "name of this replica (default: the listen address)")
	f.DurationVar(&o.cfg.LeaseTTL, "lease-ttl", 0, "how long a silent node stays a member (default 10s)")
	f.DurationVar(&o.cfg.Rampup, "rampup", 0, "how long a node joining a running ring takes to reach its full weight, in 4 epochs (0: at once)")
	f.DurationVar(&o.cfg.EpochBatchWindow, "epoch-batch-window", 0, "membership changes within this window make one epoch (default 2s)")
	f.IntVar(&o.cfg.MaxMembers, "max-members", 0, "members the ring may hold: a hello from a new id past it is refused (default 16384)")
	f.IntVar(&o.cfg.MaxRegistering, "max-registering", 0, "node sessions registered at once (each costs etcd a few requests); more hellos wait their turn up to 15 s, or are told when to retry (default 32)")
	f.StringVar(&o.cfg.AdminToken, "admin-token", "", "bearer token of admin calls, also presented to the node a warm runs on (prefer --admin-token-file; default $SHARDCACHE_TOKEN)")
	f.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the admin token (a mounted secret)")
	f.StringVar(&o.cfg.TLS.CertFile, "tls-cert", "", "TLS certificate of the gRPC listener (PEM)")
	f.StringVar(&o.cfg.TLS.KeyFile, "tls-key", "", "key of the TLS certificate")
	f.StringVar(&o.cfg.TLS.ClientCAFile, "client-ca", "", "CA of admin client certificates (mTLS; such callers need no token)")
	f.StringSliceVar(&o.cfg.TLS.Names, "tls-names", nil, "serve TLS with a certificate the control plane's own CA (--ca) issues for these DNS names and IPs, renewed; nodes verify it with the CA's certificate")
	f.BoolVar(&o.cfg.TLS.InsecurePlaintext, "insecure-plaintext", false, "serve gRPC without TLS on a listener off loopback: admin and join tokens cross the network in the clear")
	f.StringVar(&o.cfg.EtcdTLS.CAFile, "etcd-ca", "", "CA of etcd's TLS certificate (for https:// endpoints)")
	f.StringVar(&o.cfg.EtcdTLS.CertFile, "etcd-cert", "", "client certificate for etcd (mutual TLS)")
	f.StringVar(&o.cfg.EtcdTLS.KeyFile, "etcd-key", "", "key of --etcd-cert")
	f.BoolVar(&o.cfg.CA.Enabled, "ca", false, "act as the certificate authority of the peer hop: issue nodes short-lived certificates for their ids")
	f.StringVar(&o.cfg.CA.CertFile, "ca-cert", "", "CA certificate for --ca (PEM; default: a CA generated once and kept in etcd, its key sealed with --ca-seal-key-file)")
	f.StringVar(&o.cfg.CA.KeyFile, "ca-key", "", "key of --ca-cert")
	f.StringVar(&o.cfg.CA.SealKeyFile, "ca-seal-key-file", "", "secret (32+ random bytes, mounted on every replica) that seals the CA key kept in etcd; needed by --ca without --ca-cert")
	f.DurationVar(&o.cfg.CA.CertTTL, "peer-cert-ttl", 0, "lifetime of an issued peer certificate (default 1h)")
	f.StringVar(&o.cfg.OpsAddr, "ops", "127.0.0.1:9190", "ops listen address: /metrics (Prometheus) and /healthz, open; pprof with the admin token; empty: none")
	f.Float64Var(&o.cfg.PurgeRate, "purge-rate", 0, "purges a second each caller (by address) may make past its burst (default 2000)")
	f.IntVar(&o.cfg.PurgeBurst, "purge-burst", 0, "purges each caller may make at once (default 2000)")
	f.DurationVar(&o.cfg.PurgeAckInterval, "purge-ack-interval", 0, "the batch of purge acknowledgements: the revisions this replica's nodes applied are written to etcd this long after the first change (longer while nodes converge on a purge), or at once when every node has applied a purge (default 50ms)")
	f.DurationVar(&o.cfg.ForgetAbsentAfter, "forget-absent-after", time.Hour, "how long purges report a node with no session (cut off, or dead without leaving) as unreachable and wait for it; negative: always")
	f.IntVar(&o.cfg.PolicyHistory, "policy-history", 0, "changes of the policy set kept for cachectl policy history and rollback (default 100)")
	f.DurationVar(&o.cfg.PurgeRetention, "purge-retention", 24*time.Hour, "how long purges stay recorded for nodes that are away; a node away longer drops everything it stored")
	f.StringVar(&o.cfg.JoinToken, "join-token", "", "secret nodes must present to join (prefer --join-token-file; default $SHARDCACHE_JOIN_TOKEN)")
	f.StringVar(&o.joinTokenFile, "join-token-file", "", "file holding the join token (a mounted secret)")
	f.BoolVar(&o.cfg.InsecureOpenJoin, "insecure-open-join", false, "let nodes join without a join token on a listener off loopback: any process that reaches it can join the ring")
	o.log.register(cmd)
	return cmd
}

func (o *controlOptions) run(cmd *cobra.Command) error {
	logger, err := o.log.logger()
	if err != nil {
		return err
	}
	o.cfg.Logger = logger
	if o.endpoints != "" {
		o.cfg.EtcdEndpoints = strings.Split(o.endpoints, ",")
	}
	if o.cfg.AdminToken, err = secret.Resolve("admin-token", o.cfg.AdminToken, o.adminTokenFile, "SHARDCACHE_TOKEN"); err != nil {
		return err
	}
	if o.cfg.JoinToken, err = secret.Resolve("join-token", o.cfg.JoinToken, o.joinTokenFile, "SHARDCACHE_JOIN_TOKEN"); err != nil {
		return err
	}
	tp, stopTracing, err := telemetry.Tracing(cmd.Context(), "shardcache-control", o.cfg.ReplicaID)
	if err != nil {
		return err
	}
	defer stopTracing()
	o.cfg.TracerProvider = tp
	srv, err := controlplane.New(o.cfg)
	if err != nil {
		return err
	}
	return srv.Run(cmd.Context())
}
