package controlplane

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdStartTimeout bounds how long the embedded etcd may take to become
// ready; it normally takes well under a second.
const etcdStartTimeout = 60 * time.Second

// startEmbeddedEtcd starts a single-member etcd and returns once it serves
// clients. The caller closes it.
func startEmbeddedEtcd(ctx context.Context, cfg EmbeddedEtcdConfig) (*embed.Etcd, error) {
	cu, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd client URL: %w", err)
	}
	pu, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd peer URL: %w", err)
	}
	ec := embed.NewConfig()
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{*cu}
	ec.AdvertiseClientUrls = []url.URL{*cu}
	ec.ListenPeerUrls = []url.URL{*pu}
	ec.AdvertisePeerUrls = []url.URL{*pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	// etcd logs shutdown as errors with stack traces; its real failures
	// reach the caller through StartEtcd and Err instead.
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Member and status records churn with every load report: compact hourly
	// so the backend does not grow without bound.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(etcdStartTimeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after %s", etcdStartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
}
