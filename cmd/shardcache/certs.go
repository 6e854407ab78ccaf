package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/controlplane"
)

// certsOptions are the flags of shardcache tls-files.
type certsOptions struct {
	names    []string
	out      string
	validity time.Duration
}

// newCertsCommand writes the files of a control plane's TLS: a CA of its
// own, and a server certificate and key for the names nodes and cachectl
// reach it by. The Kubernetes manifests mount them from the Secret
// shardcache-control-tls.
func newCertsCommand() *cobra.Command {
	o := &certsOptions{}
	cmd := &cobra.Command{
		Use:   "tls-files",
		Short: "Write a CA and a TLS certificate for the control plane (ca.crt, tls.crt, tls.key)",
		Long: `Write the files of the control plane's TLS into --out: ca.crt (a CA of its own,
which nodes take as --control-plane-ca and cachectl as --ca), tls.crt and tls.key
(the control plane's --tls-cert and --tls-key, for --names). The CA's key is not
kept: issue new files to renew. For Kubernetes:

  shardcache tls-files --names shardcache-control,shardcache-control.shardcache.svc --out tls
  kubectl -n shardcache create secret generic shardcache-control-tls --from-file=tls/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.names, "names", nil, "DNS names and IP addresses nodes and cachectl reach the control plane by (required)")
	f.StringVar(&o.out, "out", "", "directory to write ca.crt, tls.crt and tls.key into (required; created)")
	f.DurationVar(&o.validity, "validity", 365*24*time.Hour, "how long the TLS certificate is valid")
	return cmd
}

func (o *certsOptions) run(cmd *cobra.Command) error {
	if len(o.names) == 0 || o.out == "" {
		return fmt.Errorf("give --names (what nodes dial the control plane by) and --out")
	}
	if o.validity < time.Hour {
		return fmt.Errorf("--validity %s: at least 1h", o.validity)
	}
	ca, cert, key, err := controlplane.GenerateTLS(o.names, o.validity)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		b    []byte
		mode os.FileMode
	}{{"ca.crt", ca, 0o644}, {"tls.crt", cert, 0o644}, {"tls.key", key, 0o600}} {
		p := filepath.Join(o.out, f.name)
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists; choose another --out, or remove it to replace it", p)
		}
		if err := os.WriteFile(p, f.b, f.mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s and %s for %v\n", filepath.Join(o.out, "ca.crt"), filepath.Join(o.out, "tls.crt"),
		filepath.Join(o.out, "tls.key"), o.names)
	return nil
}
