package controlplane

import (
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A node's requests cost the replica what a node needs, not what it asks:
// a certificate is signed at most certsBurst times in a row (past it the
// last one again), and a self-drain, an etcd write every replica's watch
// sees, at most drainsBurst times in a row.
func TestASessionsRequestsAreBounded(t *testing.T) {
	seal := sealKeyFile(t, "a seal key of at least thirty-two bytes")
	s, _, _ := startServer(t, nil, func(c *Config) { c.CA = CAConfig{Enabled: true, CertTTL: time.Hour, SealKeyFile: seal} })
	csr := csrFor(t, "n1")
	n1, snap := openSessionWith(t, dial(t, s), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"}, Csr: csr})
	first, _ := parseIssued(t, snap.GetCertificate())
	serials := map[string]bool{first.SerialNumber.String(): true}
	const asks = 20
	for range asks {
		if err := n1.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_CertificateRequest{CertificateRequest: &pb.CertificateRequest{Csr: csr}}}); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < asks; {
		resp, err := n1.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c := resp.GetCertificate(); c != nil {
			leaf, _ := parseIssued(t, c) // every answer a certificate for n1, none an error
			serials[leaf.SerialNumber.String()] = true
			got++
		}
	}
	if len(serials) > certsBurst {
		t.Errorf("%d certificates signed for one session's %d asks and its hello; want at most %d", len(serials), asks, certsBurst)
	}

	rev := etcdRevision(t, s)
	for range asks {
		if err := n1.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_DrainRequest{DrainRequest: &pb.DrainRequest{}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The requests are handled in order, each drain written before the
	// next is read: once a later message is answered, every drain ask
	// before it was written or dropped.
	if err := n1.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_CertificateRequest{CertificateRequest: &pb.CertificateRequest{Csr: csr}}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := n1.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetCertificate() != nil {
			break
		}
	}
	if writes := etcdRevision(t, s) - rev; writes > drainsBurst+4 {
		t.Errorf("%d etcd writes after %d drain asks; want the drain written at most %d times (and the epoch it makes)", writes, asks, drainsBurst)
	}
}

// The bound leaves a node the renewals its certificate's lifetime needs:
// a node renews two thirds into the life left, so with a lifetime of a
// few seconds (--peer-cert-ttl, 3s in the e2e renewal test) it asks every
// couple of seconds for as long as its session lasts, and each ask must be
// answered with a new certificate, never the one about to expire.
func TestASessionRenewsAShortLivedCertificateForAsLongAsItLasts(t *testing.T) {
	const ttl = 2 * time.Second // the shortest Validate takes
	seal := sealKeyFile(t, "a seal key of at least thirty-two bytes")
	s, _, _ := startServer(t, nil, func(c *Config) { c.CA = CAConfig{Enabled: true, CertTTL: ttl, SealKeyFile: seal} })
	csr := csrFor(t, "n1")
	n1, snap := openSessionWith(t, dial(t, s), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"}, Csr: csr})
	leaf, _ := parseIssued(t, snap.GetCertificate())
	for i := range 2 * certsBurst {
		// As relay.Certs.Install schedules the renewal.
		time.Sleep(time.Until(leaf.NotAfter) * 2 / 3)
		if err := n1.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_CertificateRequest{CertificateRequest: &pb.CertificateRequest{Csr: csr}}}); err != nil {
			t.Fatal(err)
		}
		var c *pb.Certificate
		for c == nil {
			resp, err := n1.stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			c = resp.GetCertificate()
		}
		if c.GetError() != "" {
			t.Fatalf("renewal %d: %s", i+1, c.GetError())
		}
		next, _ := parseIssued(t, c)
		if next.SerialNumber.Cmp(leaf.SerialNumber) == 0 || next.NotAfter.Before(leaf.NotAfter) {
			t.Fatalf("renewal %d answered with the certificate it renews (expiring at %s): the node's certificate runs out",
				i+1, leaf.NotAfter.Format(time.StampMilli))
		}
		leaf = next
	}
}
