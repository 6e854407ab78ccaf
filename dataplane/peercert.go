package dataplane

import (
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
