package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/secret"
)

// newDrainCommand asks the node on this host to drain: a pod's preStop
// hook runs it inside the pod. The ops listener takes the drain, a POST,
// only with the admin token, from loopback too.
func newDrainCommand() *cobra.Command {
	var ops, token, tokenFile string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Take the node on this host out of the ring and wait for its handoff (a preStop hook)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := secret.Resolve("admin-token", token, tokenFile, "SHARDCACHE_TOKEN")
			if err != nil {
				return err
			}
			if token == "" {
				return fmt.Errorf("the node's ops listener drains only with the admin token: give --admin-token-file (or $SHARDCACHE_TOKEN)")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ops+"/drain", nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("draining the node at %s: %w", ops, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("draining the node at %s: %s: %s", ops, resp.Status, strings.TrimSpace(string(b)))
			}
			fmt.Fprint(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	cmd.Flags().StringVar(&ops, "ops", "127.0.0.1:9191", "the node's ops address, on this host")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the drain")
	cmd.Flags().StringVar(&token, "admin-token", "", "the admin token (prefer --admin-token-file; default $SHARDCACHE_TOKEN)")
	cmd.Flags().StringVar(&tokenFile, "admin-token-file", "", "file holding the admin token (a mounted secret)")
	return cmd
}
