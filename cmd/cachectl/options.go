package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/devtoken"
	"github.com/shardcache/shardcache/cmd/internal/secret"
	"github.com/shardcache/shardcache/cmd/internal/tlsfiles"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
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
	// insecurePlaintext sends the token in cleartext off loopback.
	insecurePlaintext bool
	// nodes are ops addresses to learn the members from instead of the
	// control plane.
	nodes []string
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
	var nodes []string
	if env := os.Getenv("SHARDCACHE_NODES"); env != "" {
		nodes = strings.Split(env, ",")
	}
	f.StringSliceVar(&g.nodes, "nodes", nodes, "ops addresses (host:port,...) of nodes to learn the members from, for stats, top, log, inspect and version without the control plane ($SHARDCACHE_NODES sets the default)")
	f.DurationVar(&g.timeout, "timeout", 10*time.Second, "timeout of each call")
	f.StringVar(&g.ca, "ca", "", "CA that signed the control plane's TLS certificate (enables TLS)")
	f.StringVar(&g.cert, "cert", "", "client certificate for mTLS (replaces the token)")
	f.StringVar(&g.key, "key", "", "key of the client certificate")
	f.BoolVar(&g.insecurePlaintext, "insecure-plaintext", false, "send the token in cleartext to a control plane off loopback without --ca (one started with --insecure-plaintext)")
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
		t, err := devtoken.Read(g.controlPlane)
		if err != nil {
			return nil, err
		}
		token = t
	}
	c, err := admin.New(admin.Config{Address: g.controlPlane, Token: token, Timeout: g.timeout, TLS: tc, InsecurePlaintext: g.insecurePlaintext})
	if errors.Is(err, admin.ErrCleartext) {
		return nil, fmt.Errorf("--control-plane: %w (--ca names the CA of its TLS certificate; --insecure-plaintext sends the token in cleartext)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--control-plane: %w", err)
	}
	return c, nil
}

// listNodes returns the cluster's nodes: from the first of --nodes that
// answers, or else from the control plane. A control plane that does not
// answer gets an error that names --nodes.
func (g *globalOptions) listNodes(ctx context.Context, c *admin.Client) (*pb.ListNodesResponse, error) {
	if len(g.nodes) > 0 {
		return c.NodesFrom(ctx, g.nodes)
	}
	resp, err := c.ListNodes(ctx)
	if errors.Is(err, admin.ErrUnavailable) {
		return nil, fmt.Errorf("%w (--nodes HOST:PORT of any node's ops listener reads the nodes without it)", err)
	}
	return resp, err
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
