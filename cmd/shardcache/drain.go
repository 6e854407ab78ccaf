package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newDrainCommand asks the node on this host to drain: a pod's preStop
// hook runs it inside the pod, so the request comes from loopback, which
// the ops listener serves /drain to without the admin token.
func newDrainCommand() *cobra.Command {
	var ops string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Take the node on this host out of the ring and wait for its handoff (a preStop hook)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ops+"/drain", nil)
			if err != nil {
				return err
			}
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
	return cmd
}
