package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/devtoken"
	"github.com/shardcache/shardcache/cmd/internal/secret"
	"github.com/shardcache/shardcache/cmd/internal/tlsfiles"
	"github.com/shardcache/shardcache/sdk/admin"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	controlPlane string
	token        string
	tokenFile    string
	output       string
	timeout      time.Duration
	ca           string
	cert, key    string
}

func (g *globalOptions) register(root *cobra.Command) {
	f := root.PersistentFlags()
	def := os.Getenv("SHARDCACHE_CONTROL_PLANE")
	if def == "" {
		def = "127.0.0.1:7070"
	}
	f.StringVar(&g.controlPlane, "control-plane", def, "control-plane address ($SHARDCACHE_CONTROL_PLANE sets the default)")
	f.StringVar(&g.token, "token", "", "admin token (prefer --token-file; default $SHARDCACHE_TOKEN, then the dev token file)")
	f.StringVar(&g.tokenFile, "token-file", "", "file holding the admin token")
	f.StringVarP(&g.output, "output", "o", "table", "output format: table, wide (every column), json or yaml")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	f.DurationVar(&g.timeout, "timeout", 10*time.Second, "timeout of each call")
	f.StringVar(&g.ca, "ca", "", "CA that signed the control plane's TLS certificate (enables TLS)")
	f.StringVar(&g.cert, "cert", "", "client certificate for mTLS (replaces the token)")
	f.StringVar(&g.key, "key", "", "key of the client certificate")
}

// client returns an admin client from the flags, the environment or the dev
// token file, in that order.
func (g *globalOptions) client() (*admin.Client, error) {
	if err := checkFormat(g.output); err != nil {
		return nil, err
	}
	tc, err := tlsfiles.Client(g.ca, g.cert, g.key)
	if err != nil {
		return nil, err
	}
	token, err := secret.Resolve("token", g.token, g.tokenFile, "SHARDCACHE_TOKEN")
	if err != nil {
		return nil, err
	}
	if token == "" && g.cert == "" {
		t, err := devtoken.Read()
		if err != nil {
			return nil, err
		}
		token = t
	}
	c, err := admin.New(admin.Config{Address: g.controlPlane, Token: token, Timeout: g.timeout, TLS: tc})
	if err != nil {
		return nil, fmt.Errorf("--control-plane: %w", err)
	}
	return c, nil
}

// withClient runs f with an admin client built from the flags, and closes it.
func (g *globalOptions) withClient(f func(*admin.Client) error) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}
