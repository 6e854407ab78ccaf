package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardcache/shardcache/cmd/internal/demo"
)

func newOriginCommand() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "origin",
		Short: "Run the demo origin alone (GET /obj/<id>?size=N; request count at /_stats)",
		Long: `Run the demo origin that shardcache dev starts: GET /obj/<id>?size=N returns N
deterministic bytes that a shared cache may keep for an hour, with Range and
conditional requests supported; GET /_stats returns how many objects it served.
Benchmarks use it as the common origin of every system they compare.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("origin listener: %w", err)
			}
			srv := &http.Server{Handler: &demo.Origin{}, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			}()
			fmt.Fprintf(cmd.OutOrStdout(), "demo origin serving on http://%s\n", l.Addr())
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8090", "listen address")
	return cmd
}
