package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/shardcache/shardcache/cmd/internal/demo"
	"github.com/shardcache/shardcache/cmd/internal/devtoken"
	"github.com/shardcache/shardcache/cmd/internal/telemetry"
	"github.com/shardcache/shardcache/cmd/internal/units"
	"github.com/shardcache/shardcache/controlplane"
	"github.com/shardcache/shardcache/dataplane"
)

type devOptions struct {
	origin     string
	originAddr string
	dataDir    string
	control    string
	etcdClient string
	etcdPeer   string
	nodes      int
	diskBytes  int64
	access     accessLogOptions
	portOffset int
	certTTL    time.Duration
	log        logOptions
}

func newDevCommand() *cobra.Command {
	o := &devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole cluster on this machine: embedded etcd, control plane, nodes and a demo origin",
		Long: `Run a whole shardcache cluster on 127.0.0.1: an embedded etcd, a control plane,
three nodes (node-1..node-3) and a demo origin. Node i listens for clients on
127.0.0.1:808i, for peers on 127.0.0.1:908i and for ops on 127.0.0.1:919i.
The admin token is written where cachectl finds it. Stop with Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), cmd.OutOrStdout()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.origin, "origin", "", "front this origin (base URL) instead of the demo origin")
	f.StringVar(&o.originAddr, "demo-origin", "127.0.0.1:8090", "listen address of the demo origin")
	f.StringVar(&o.dataDir, "data-dir", "", "keep etcd's and each node's data under this directory across runs (default: a temporary directory removed on exit)")
	f.StringVar(&o.control, "control", "127.0.0.1:7070", "control-plane listen address")
	f.StringVar(&o.etcdClient, "etcd-client-url", "http://127.0.0.1:7071", "client URL of the embedded etcd")
	f.StringVar(&o.etcdPeer, "etcd-peer-url", "http://127.0.0.1:7072", "peer URL of the embedded etcd")
	f.IntVar(&o.nodes, "nodes", 3, "number of nodes (1 to 9)")
	f.IntVar(&o.portOffset, "port-offset", 0, "add this to every default port, to run beside another dev cluster")
	f.DurationVar(&o.certTTL, "peer-cert-ttl", time.Hour, "lifetime of the nodes' peer-hop certificates, renewed before they expire")
	o.diskBytes = 1 << 30
	f.Var(units.Value{N: &o.diskBytes}, "disk", "disk tier budget of each node")
	o.access.register(cmd, "off")
	o.log.register(cmd)
	return cmd
}

func (o *devOptions) run(ctx context.Context, out io.Writer) error {
	if o.nodes < 1 || o.nodes > 9 {
		return fmt.Errorf("--nodes %d: want 1 to 9", o.nodes)
	}
	logger, err := o.log.logger()
	if err != nil {
		return err
	}
	if o.portOffset < 0 || o.portOffset > 50000 {
		return fmt.Errorf("--port-offset %d: want 0 to 50000", o.portOffset)
	}
	for _, a := range []*string{&o.control, &o.originAddr, &o.etcdClient, &o.etcdPeer} {
		if *a, err = shiftPort(*a, o.portOffset); err != nil {
			return err
		}
	}
	access, closeAccess, err := o.access.open()
	if err != nil {
		return err
	}
	defer closeAccess()
	dataDir := o.dataDir
	if dataDir == "" {
		if dataDir, err = os.MkdirTemp("", "shardcache-dev-"); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		defer os.RemoveAll(dataDir)
	} else if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}

	origin := o.origin
	var originSrv *http.Server
	var originLis net.Listener
	if origin == "" {
		if originLis, err = net.Listen("tcp", o.originAddr); err != nil {
			return fmt.Errorf("demo origin listener: %w", err)
		}
		defer originLis.Close()
		originSrv = &http.Server{Handler: &demo.Origin{}, ReadHeaderTimeout: 10 * time.Second}
		origin = "http://" + originLis.Addr().String()
	}

	token, err := newToken()
	if err != nil {
		return err
	}
	// The CA the control plane keeps in the dev etcd is sealed with a key
	// kept beside it, made at the first start.
	sealKey := filepath.Join(dataDir, "ca-seal.key")
	if _, err := os.Stat(sealKey); os.IsNotExist(err) {
		k, err := newToken()
		if err != nil {
			return err
		}
		if err := os.WriteFile(sealKey, []byte(k+"\n"), 0o600); err != nil {
			return fmt.Errorf("CA seal key: %w", err)
		}
	}
	joinToken, err := newToken()
	if err != nil {
		return err
	}
	// One tracer provider for the whole dev cluster, when OTEL_* asks for it.
	tp, stopTracing, err := telemetry.Tracing(ctx, "shardcache-dev", "dev")
	if err != nil {
		return err
	}
	defer stopTracing()
	cp, err := controlplane.New(controlplane.Config{
		ListenAddr:     o.control,
		OpsAddr:        fmt.Sprintf("127.0.0.1:%d", 9190+o.portOffset),
		TracerProvider: tp,
		EmbeddedEtcd:   controlplane.EmbeddedEtcdConfig{Dir: filepath.Join(dataDir, "etcd"), ClientURL: o.etcdClient, PeerURL: o.etcdPeer},
		AdminToken:     token,
		JoinToken:      joinToken,
		// One machine: no reason to wait long for more changes, and a
		// stopped node should leave quickly.
		EpochBatchWindow: 500 * time.Millisecond,
		// The peer hop is mutual TLS with certificates this control plane
		// issues and renews.
		CA:       controlplane.CAConfig{Enabled: true, CertTTL: o.certTTL, SealKeyFile: sealKey},
		LeaseTTL: 5 * time.Second,
		Logger:   logger.With("component", "control"),
	})
	if err != nil {
		return err
	}
	nodes := make([]*dataplane.Node, 0, o.nodes)
	for i := 1; i <= o.nodes; i++ {
		n, err := dataplane.New(dataplane.Config{
			ID:                        fmt.Sprintf("node-%d", i),
			ClientAddr:                fmt.Sprintf("127.0.0.1:%d", 8080+i+o.portOffset),
			PeerAddr:                  fmt.Sprintf("127.0.0.1:%d", 9080+i+o.portOffset),
			OpsAddr:                   fmt.Sprintf("127.0.0.1:%d", 9190+i+o.portOffset),
			ControlPlane:              o.control,
			Origin:                    origin,
			JoinToken:                 joinToken,
			DataDir:                   filepath.Join(dataDir, fmt.Sprintf("node-%d", i)),
			DiskBytes:                 o.diskBytes,
			AccessLog:                 access,
			PeerCertsFromControlPlane: true,
			AccessLogSample:           o.access.sample,
			// PURGE from this machine needs no token.
			PurgeAllow:     []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
			AdminToken:     token,
			TracerProvider: tp,
			// The nodes stop together: none is left to hand off to.
			DrainGrace: -1,
			Logger:     logger,
		})
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}

	g, gctx := errgroup.WithContext(ctx)
	if originSrv != nil {
		g.Go(func() error {
			if err := originSrv.Serve(originLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("demo origin: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return originSrv.Shutdown(sctx)
		})
	}
	// The nodes stop first, so their goodbyes reach the control plane; the
	// control plane stops once they are gone.
	cpCtx, stopControl := context.WithCancel(context.WithoutCancel(ctx))
	defer stopControl()
	g.Go(func() error { return cp.Run(cpCtx) })
	g.Go(func() error {
		defer stopControl()
		select {
		case <-cp.Ready():
		case <-gctx.Done():
			return nil
		}
		// Written once the control plane holds its address: a second
		// cluster started on it by mistake fails before it touches the
		// first one's token.
		tokenPath, err := devtoken.Write(o.control, token)
		if err != nil {
			return err
		}
		defer devtoken.Remove(tokenPath, token)
		ng, nctx := errgroup.WithContext(gctx)
		for _, n := range nodes {
			ng.Go(func() error { return n.Run(nctx) })
		}
		ng.Go(func() error {
			if waitForRing(nctx, nodes) {
				printBanner(out, o, origin, dataDir, tokenPath, nodes)
			}
			return nil
		})
		return ng.Wait()
	})
	err = g.Wait()
	logger.Info("dev cluster stopped")
	if err != nil {
		return err
	}
	return nil
}

// waitForRing waits until every node serves with an epoch holding all of
// them; it reports false if ctx ended first.
func waitForRing(ctx context.Context, nodes []*dataplane.Node) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		complete := true
		for _, n := range nodes {
			if n.RingMembers() != len(nodes) {
				complete = false
			}
		}
		if complete {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

func printBanner(out io.Writer, o *devOptions, origin, dataDir, tokenPath string, nodes []*dataplane.Node) {
	w := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	w("")
	w("shardcache dev cluster is up: ring epoch %d, %d nodes", nodes[0].Epoch(), len(nodes))
	w("  control plane  %s  (admin token in %s)", o.control, tokenPath)
	w("  etcd           %s  (embedded; data in %s)", o.etcdClient, filepath.Join(dataDir, "etcd"))
	if o.origin == "" {
		w("  origin         %s  (demo: GET /obj/<id>?size=N)", origin)
	} else {
		shown := origin
		if u, err := url.Parse(origin); err == nil {
			shown = u.Redacted() // no password on the screen
		}
		w("  origin         %s", shown)
	}
	for _, n := range nodes {
		w("  %-13s  client http://%s  peer %s  ops http://%s", n.ID(), n.ClientAddr(), n.PeerAddr(), n.OpsAddr())
	}
	w("Try:")
	w("  curl -si http://%s/obj/1?size=1000    # X-Cache: MISS", nodes[min(1, len(nodes)-1)].ClientAddr())
	w("  curl -si http://%s/obj/1?size=1000    # X-Cache: HIT, from the same owner", nodes[0].ClientAddr())
	cachectl := cachectlCommand()
	if o.control != devtoken.DefaultControlPlane {
		cachectl += " --control-plane " + o.control
	}
	w("  %s ring", cachectl)
	w("  %s nodes", cachectl)
	w("Stop with Ctrl-C.")
	w("")
}

// shiftPort adds off to the port of addr, a host:port or a URL.
func shiftPort(addr string, off int) (string, error) {
	if off == 0 {
		return addr, nil
	}
	scheme, hostport, isURL := strings.Cut(addr, "://")
	if !isURL {
		hostport, scheme = scheme, ""
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p+off > 65535 {
		return "", fmt.Errorf("address %q: port plus offset %d is not a port", addr, off)
	}
	shifted := net.JoinHostPort(host, strconv.Itoa(p+off))
	if isURL {
		return scheme + "://" + shifted, nil
	}
	return shifted, nil
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making the admin token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// cachectlCommand is how to run cachectl from here: the binary built
// beside this one (make build puts both in .bin/), else go run.
func cachectlCommand() string {
	self, err := os.Executable()
	if err != nil {
		return "go run ./cmd/cachectl"
	}
	bin := filepath.Join(filepath.Dir(self), "cachectl")
	if _, err := os.Stat(bin); err != nil {
		return "go run ./cmd/cachectl"
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, bin); err == nil && !strings.HasPrefix(rel, "..") {
			return "./" + rel
		}
	}
	return bin
}
