package controlplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/sdk/loopback"
)

// Config configures a control-plane replica. The zero value of every field
// means its default; defaults are filled by Server's constructor.
type Config struct {
	// ListenAddr is host:port of the gRPC listener (NodeService, AdminService,
	// health, reflection). Default "127.0.0.1:7070".
	ListenAddr string

	// EtcdEndpoints are the client URLs of an existing etcd cluster. Empty
	// starts an embedded etcd configured by EmbeddedEtcd.
	EtcdEndpoints []string
	// EtcdTLS, when a file is named, connects to EtcdEndpoints over TLS
	// (and mutual TLS with a client certificate).
	EtcdTLS EtcdTLSConfig
	// EtcdDialTimeout bounds the first contact with etcd; an unreachable etcd
	// makes Run fail after it. Default 5s.
	EtcdDialTimeout time.Duration
	// EmbeddedEtcd configures the embedded etcd used when EtcdEndpoints is empty.
	EmbeddedEtcd EmbeddedEtcdConfig

	// Prefix is the etcd key prefix of all shardcache state. Default "/shardcache/".
	Prefix string
	// ReplicaID names this replica in elections and in ListNodes. Default: the
	// listen address.
	ReplicaID string

	// LeaseTTL is how long a node that stopped answering stays a member: its
	// session's replica removes its member record this long after the
	// session broke, and every record is bound to the replica's etcd lease
	// of this TTL, so that a replica that dies takes its nodes' records
	// with it unless they register again elsewhere meanwhile. Default 10s. Values under 2s are refused: a loaded etcd can
	// miss a keepalive, and a member flapping out of the ring moves keys.
	LeaseTTL time.Duration
	// EpochBatchWindow is how long the leader waits after a membership change
	// before writing a new epoch, so that changes close together (a rolling
	// restart) become one epoch. Default 2s.
	EpochBatchWindow time.Duration
	// Rampup is how long a member that joins a running ring takes to reach
	// its full weight: its weight rises in rampSteps epochs over Rampup, so
	// its keys move to it a part at a time, as Varnish's shard director
	// ramps a backend up. 0 gives it its full weight at once.
	Rampup time.Duration
	// EpochsKept is how many past epochs stay readable. Default 20.
	EpochsKept int
	// MaxRegistering is how many node sessions the replica registers at
	// once, from the hello to the snapshot sent (each costs etcd a few
	// requests). Hellos beyond it wait their turn up to 15 s, at most 32
	// times as many; the others are refused with a delay to retry after,
	// so that every node's hello at once, as after a restart, does not
	// overload etcd. Default 32.
	MaxRegistering int
	// MaxMembers bounds the ring's members: a hello from a new id when the
	// current epoch has this many is refused (RESOURCE_EXHAUSTED), so that
	// a join-token holder cannot grow every epoch, pushed to every node,
	// without end. A member's own id is always taken again. The epoch
	// lags registrations by its batch window, so the ring may pass the
	// bound by the registrations of one window. Default 16384.
	MaxMembers int

	// PurgeRetention is how long purges stay recorded for nodes that are
	// away to apply when they reconnect; a node away longer drops
	// everything it stored before. Default 24h.
	PurgeRetention time.Duration
	// ForgetAbsentAfter is how long a node with no session (cut off from
	// the control plane, or dead without leaving) is still reported by
	// purges as unreachable and waited for. Default 1h; negative: always.
	ForgetAbsentAfter time.Duration
	// PurgeMaxRecords caps the purges kept, oldest deleted first. Default 100000.
	PurgeMaxRecords int
	// PurgeViewWindow is how many of the newest purges a replica keeps
	// whole in memory for its sessions; of older retained purges it
	// keeps what compaction needs, and a node behind the window gets them
	// from a read of etcd. Default 10000.
	PurgeViewWindow int
	// PurgeCompactInterval is how often the leader deletes purges past the
	// retention. Default 1m.
	PurgeCompactInterval time.Duration
	// PolicyHistory is how many changes of the policy set are kept for
	// `policy history` and `policy rollback`, oldest forgotten first.
	// Default 100.
	PolicyHistory int
	// PurgeRate and PurgeBurst bound the purges each caller (by address)
	// may make: PurgeBurst at once, then PurgeRate a second; past it a
	// purge is refused with ResourceExhausted, saying when to come back.
	// Defaults 2000 and 2000.
	PurgeRate  float64
	PurgeBurst int
	// PurgeAckInterval is the batch of the replica's purge watermarks: the
	// revisions its nodes applied are written as one etcd record at most
	// this often, an interval after the first change, whatever the rate
	// of purges. Default 50ms.
	PurgeAckInterval time.Duration

	// AdminToken is the bearer token AdminService calls must carry, and
	// the one the control plane presents to a node's ops listener to have
	// it warm (AdminService.Warm). Required unless TLS has a client CA.
	AdminToken string
	// JoinToken is the secret a node's hello must carry to join. A control
	// plane that listens off loopback refuses to start without one, unless
	// InsecureOpenJoin.
	JoinToken string
	// InsecureOpenJoin lets any process that reaches ListenAddr join the
	// ring (and get peer certificates) without a join token.
	InsecureOpenJoin bool
	// AuthRetryEvery is how often a caller that has used up its failed
	// authentications (10 per credential) is verified again: its next
	// attempt waits this long, then a right credential passes. Default
	// 6 s.
	AuthRetryEvery time.Duration

	// TLS, when its certificate is set (or its Names, issued by CA),
	// serves gRPC over TLS; with a client CA it also accepts admin callers
	// by client certificate (mTLS) instead of the bearer token. Off
	// loopback, it is required unless TLS.InsecurePlaintext says not.
	TLS TLSConfig

	// CA makes the control plane the cluster's certificate authority for
	// the peer hop: nodes send a CSR on their session and get a short-lived
	// certificate for their member id, renewed before it expires.
	CA CAConfig

	// OpsAddr, when set, is host:port of an HTTP listener serving
	// /metrics (Prometheus) and /healthz.
	OpsAddr string
	// TracerProvider, when set, traces gRPC calls (W3C trace context) and
	// purges' fan-out with OpenTelemetry.
	TracerProvider trace.TracerProvider

	// Logger receives the replica's logs. Default: slog.Default().
	Logger *slog.Logger
}

// CAConfig configures the certificate authority for the peer hop.
type CAConfig struct {
	// Enabled turns issuing on.
	Enabled bool
	// CertFile and KeyFile are the CA's certificate and key, kept out of
	// etcd. Empty: the replicas share a CA generated once and kept in etcd
	// under Prefix, its key sealed (AES-256-GCM) with SealKeyFile.
	CertFile, KeyFile string
	// SealKeyFile holds the secret (at least 32 bytes, a mounted secret
	// every replica has) that seals the CA key kept in etcd. Required for
	// a CA kept in etcd: whoever reads etcd must not be able to issue
	// certificates.
	SealKeyFile string
	// CertTTL is the lifetime of an issued certificate. Default 1h; at
	// least 2s.
	CertTTL time.Duration
}

// TLSConfig names the PEM files of the control plane's TLS.
type TLSConfig struct {
	// CertFile and KeyFile are the server's certificate and key.
	CertFile, KeyFile string
	// Names, without CertFile, has the replica serve TLS with a
	// certificate its own certificate authority (CA, which must be on)
	// issues it for these DNS names and IP addresses, renewed before it
	// expires: nodes and cachectl verify it with the CA's certificate.
	Names []string
	// InsecurePlaintext serves gRPC without TLS on a listener off
	// loopback: tokens then cross the network in the clear. Without it
	// such a replica refuses to start.
	InsecurePlaintext bool
	// ClientCAFile, when set, verifies client certificates: an admin caller
	// presenting one signed by this CA needs no token.
	ClientCAFile string
}

// EmbeddedEtcdConfig configures the embedded etcd.
type EmbeddedEtcdConfig struct {
	// Dir holds etcd's data. Required when the embedded etcd is used.
	Dir string
	// ClientURL is where the embedded etcd serves clients. Default "http://127.0.0.1:2379".
	ClientURL string
	// PeerURL is where the embedded etcd listens for peers (it has none, but
	// etcd always binds one). Default "http://127.0.0.1:2380".
	PeerURL string
}

func (c *Config) setDefaults() {
	if c.AuthRetryEvery == 0 {
		c.AuthRetryEvery = authLimitEvery
	}
	if c.ListenAddr == "" {
		c.ListenAddr = "127.0.0.1:7070"
	}
	if c.EtcdDialTimeout == 0 {
		c.EtcdDialTimeout = 5 * time.Second
	}
	if c.EmbeddedEtcd.ClientURL == "" {
		c.EmbeddedEtcd.ClientURL = "http://127.0.0.1:2379"
	}
	if c.EmbeddedEtcd.PeerURL == "" {
		c.EmbeddedEtcd.PeerURL = "http://127.0.0.1:2380"
	}
	if c.Prefix == "" {
		c.Prefix = "/shardcache/"
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if c.ReplicaID == "" {
		c.ReplicaID = c.ListenAddr
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.EpochBatchWindow == 0 {
		c.EpochBatchWindow = 2 * time.Second
	}
	if c.EpochsKept == 0 {
		c.EpochsKept = 20
	}
	if c.MaxRegistering == 0 {
		c.MaxRegistering = defaultMaxRegistering
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = defaultMaxMembers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CA.CertTTL == 0 {
		c.CA.CertTTL = time.Hour
	}
	if c.PurgeRetention == 0 {
		c.PurgeRetention = 24 * time.Hour
	}
	if c.ForgetAbsentAfter == 0 {
		c.ForgetAbsentAfter = time.Hour
	}
	if c.PolicyHistory == 0 {
		c.PolicyHistory = 100
	}
	if c.PurgeMaxRecords == 0 {
		c.PurgeMaxRecords = 100000
	}
	if c.PurgeViewWindow == 0 {
		c.PurgeViewWindow = defaultPurgeWindow
	}
	if c.PurgeCompactInterval == 0 {
		c.PurgeCompactInterval = time.Minute
	}
	if c.PurgeRate == 0 {
		c.PurgeRate = 2000
	}
	if c.PurgeBurst == 0 {
		c.PurgeBurst = 2000
	}
	if c.PurgeAckInterval == 0 {
		c.PurgeAckInterval = 50 * time.Millisecond
	}
}

// Validate reports the first setting a replica cannot run with, in words an
// operator can act on.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		return fmt.Errorf("listen address %q: %w", c.ListenAddr, err)
	}
	for _, ep := range c.EtcdEndpoints {
		if err := validateURL(ep); err != nil {
			return fmt.Errorf("etcd endpoint %q: %w", ep, err)
		}
	}
	if len(c.EtcdEndpoints) == 0 {
		if c.EmbeddedEtcd.Dir == "" {
			return errors.New("embedded etcd needs a data directory (or give etcd endpoints)")
		}
		for name, u := range map[string]string{"client": c.EmbeddedEtcd.ClientURL, "peer": c.EmbeddedEtcd.PeerURL} {
			if err := validateURL(u); err != nil {
				return fmt.Errorf("embedded etcd %s URL %q: %w", name, u, err)
			}
			// The embedded etcd authenticates no one: whoever reaches it
			// could write members, purges and policies.
			if pu, _ := url.Parse(u); !loopback.Only(pu.Host) {
				return fmt.Errorf("embedded etcd %s URL %q is not on a loopback address: the embedded etcd authenticates "+
					"no one, so whoever reaches it could change the cluster. Keep it on 127.0.0.1, or run etcd apart "+
					"(--etcd-endpoints with --etcd-ca, --etcd-cert and --etcd-key)", name, u)
			}
		}
	}
	if c.LeaseTTL < 2*time.Second {
		return fmt.Errorf("lease TTL %s is below the 2s minimum", c.LeaseTTL)
	}
	if c.Rampup < 0 {
		return fmt.Errorf("rampup %s is negative", c.Rampup)
	}
	if c.EpochBatchWindow < 0 {
		return fmt.Errorf("epoch batch window %s is negative", c.EpochBatchWindow)
	}
	if c.MaxRegistering < 0 {
		return fmt.Errorf("max registering is %d; it must be at least 1", c.MaxRegistering)
	}
	if c.MaxMembers < 0 {
		return fmt.Errorf("max members is %d; it must be at least 1", c.MaxMembers)
	}
	if c.EpochsKept < 1 {
		return fmt.Errorf("epochs kept is %d; keep at least 1", c.EpochsKept)
	}
	if c.PolicyHistory < 1 || c.PolicyHistory > 10000 {
		return fmt.Errorf("policy history %d: keep 1 to 10000 changes", c.PolicyHistory)
	}
	if c.PurgeViewWindow < 1 {
		return fmt.Errorf("purge view window %d: keep at least one purge whole", c.PurgeViewWindow)
	}
	if c.PurgeRetention < time.Minute || c.PurgeMaxRecords < 1 || c.PurgeCompactInterval < 0 {
		return fmt.Errorf("purge retention %s and records %d: keep at least a minute and one record", c.PurgeRetention, c.PurgeMaxRecords)
	}
	if c.PurgeRate < 0 || c.PurgeBurst < 1 {
		return fmt.Errorf("purges per caller: rate %g a second and burst %d; give a positive rate and a burst of at least 1", c.PurgeRate, c.PurgeBurst)
	}
	if c.PurgeAckInterval < time.Millisecond || c.PurgeAckInterval > 10*time.Second {
		return fmt.Errorf("purge acknowledgement batch %s: give 1ms to 10s", c.PurgeAckInterval)
	}
	if c.AdminToken == "" && c.TLS.ClientCAFile == "" {
		return errors.New("admin token is empty (and no client CA for mTLS); admin calls would be refused")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("TLS needs both a certificate and a key file")
	}
	if c.CA.Enabled && (c.CA.CertFile == "") != (c.CA.KeyFile == "") {
		return errors.New("the certificate authority needs both its certificate and key file, or neither (a CA kept in etcd)")
	}
	if c.CA.Enabled && c.CA.CertFile == "" && c.CA.SealKeyFile == "" {
		return errors.New("the certificate authority kept in etcd needs --ca-seal-key-file (a secret of at least 32 bytes every replica mounts), " +
			"or give --ca-cert and --ca-key to keep it out of etcd")
	}
	if c.JoinToken == "" && !c.InsecureOpenJoin && !loopback.Only(c.ListenAddr) {
		return fmt.Errorf("the control plane listens on %s, off loopback, without a join token: any process that reaches it "+
			"could join the ring. Set --join-token-file, or --insecure-open-join", c.ListenAddr)
	}
	if c.CA.Enabled && c.CA.CertTTL < 2*time.Second {
		return fmt.Errorf("issued certificate lifetime %s is below the 2s minimum", c.CA.CertTTL)
	}
	if c.TLS.ClientCAFile != "" && !c.TLS.enabled() {
		return errors.New("a client CA (mTLS) needs the server's TLS certificate and key, or --tls-names")
	}
	if len(c.TLS.Names) > 0 && (c.TLS.CertFile != "" || !c.CA.Enabled) {
		return errors.New("--tls-names has the control plane's own certificate authority (--ca) issue its TLS certificate: " +
			"turn --ca on, and give no --tls-cert")
	}
	if !c.TLS.enabled() && !c.TLS.InsecurePlaintext && !loopback.Only(c.ListenAddr) {
		return fmt.Errorf("the control plane listens on %s, off loopback, without TLS: admin and join tokens would cross the "+
			"network in the clear. Set --tls-cert and --tls-key, or --tls-names with --ca (a certificate its CA issues), "+
			"or --insecure-plaintext", c.ListenAddr)
	}
	if (c.EtcdTLS.CertFile == "") != (c.EtcdTLS.KeyFile == "") {
		return errors.New("an etcd client certificate needs both --etcd-cert and --etcd-key")
	}
	return nil
}

// enabled reports whether the replica serves TLS.
func (t TLSConfig) enabled() bool { return t.CertFile != "" || len(t.Names) > 0 }

// EtcdTLSConfig names the PEM files of the replica's TLS to etcd.
type EtcdTLSConfig struct {
	// CAFile verifies etcd's certificate; empty: the system roots (for
	// https:// endpoints).
	CAFile string
	// CertFile and KeyFile are the client certificate etcd may require.
	CertFile, KeyFile string
}

// enabled reports whether any file is named.
func (t EtcdTLSConfig) enabled() bool { return t.CAFile != "" || t.CertFile != "" }

func validateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https, not %q", u.Scheme)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	return nil
}
