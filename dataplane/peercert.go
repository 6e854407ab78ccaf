package dataplane

import (
	"context"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// applyCertificate installs a certificate the control plane sent.
func (n *Node) applyCertificate(c *pb.Certificate) {
	if n.certs == nil {
		return
	}
	if err := n.certs.Install(c); err != nil {
		n.metrics.PeerCerts.WithLabelValues("refused").Inc()
		n.log.Error("peer certificate from the control plane not installed", "err", err)
		return
	}
	_, notAfter := n.certs.Due()
	n.metrics.PeerCerts.WithLabelValues("installed").Inc()
	n.metrics.PeerCertExpiry.Set(float64(notAfter.Unix()))
	n.log.Info("installed a peer certificate from the control plane", "not_after", notAfter)
}

// renewCertificates asks for a new certificate when the current one is
// two thirds through its life, again every so often until one comes, and
// every 3 seconds while there is none at all (the first one comes with the
// session's snapshot).
func (n *Node) renewCertificates(ctx context.Context) {
	lastAsk := time.Now()
	for {
		renewAt, notAfter := n.certs.Due()
		var wait time.Duration
		switch {
		case renewAt.IsZero():
			if time.Since(lastAsk) >= 3*time.Second {
				n.session.RequestCertificate()
				lastAsk = time.Now()
			}
			wait = 200 * time.Millisecond
		case time.Now().Before(renewAt):
			wait = time.Until(renewAt)
		default:
			n.session.RequestCertificate()
			// Room for the answer before asking again.
			wait = max(min(time.Until(notAfter)/4, 2*time.Second), 100*time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
