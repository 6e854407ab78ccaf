package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// relayedCtx is an admin call a node relays for client: the client's
// token, the client named, the node's join token as proof.
func relayedCtx(token, client, joinToken string) context.Context {
	return metadata.AppendToOutgoingContext(adminCtx(context.Background(), token),
		pb.PurgeForMetadata, client, pb.RelayTokenMetadata, joinToken)
}

// Wrong tokens a node relays for many clients are held against those
// clients, each on its own, never against the node: afterwards the node's
// own valid call, an admin call from its address and its session hello
// all pass at once. A client named without the node's join token is not
// believed: its failures are the caller's, as any admin call's.
func TestRelayedPurgeFailuresSpendOnlyTheirClients(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.JoinToken = "join-secret" })
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	for i := range 20 {
		client := fmt.Sprintf("198.51.100.%d", i)
		for range authLimitBurst {
			if _, err := admin.ListNodes(relayedCtx("guess", client, "join-secret"), &pb.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("a wrong token relayed for %s: %v, want Unauthenticated", client, err)
			}
		}
	}
	hurried, cancel := context.WithTimeout(relayedCtx("guess", "198.51.100.0", "join-secret"), 200*time.Millisecond)
	defer cancel()
	if _, err := admin.ListNodes(hurried, &pb.ListNodesRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a client past its burst: %v, want ResourceExhausted", err)
	}
	quick := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Second)
	}
	ctx, cancel := quick()
	defer cancel()
	if _, err := admin.ListNodes(metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+testToken)), &pb.ListNodesRequest{}); err != nil {
		t.Fatalf("an admin call from the node's address after its clients' failures: %v", err)
	}
	ctx2, cancel2 := quick()
	defer cancel2()
	md := metadata.Pairs("authorization", "Bearer "+testToken, pb.PurgeForMetadata, "203.0.113.5", pb.RelayTokenMetadata, "join-secret")
	if _, err := admin.ListNodes(metadata.NewOutgoingContext(ctx2, md), &pb.ListNodesRequest{}); err != nil {
		t.Fatalf("a valid PURGE the node relays for another client: %v", err)
	}
	openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:1"}, JoinToken: "join-secret"})

	// Without the node's proof the named client is ignored: the caller's
	// own admin bucket pays.
	for range authLimitBurst {
		admin.ListNodes(relayedCtx("guess", "192.0.2.1", "not-the-join-token"), &pb.ListNodesRequest{})
	}
	ctx3, cancel3 := context.WithTimeout(relayedCtx("guess", "192.0.2.2", "not-the-join-token"), 200*time.Millisecond)
	defer cancel3()
	if _, err := admin.ListNodes(ctx3, &pb.ListNodesRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an unproven client name dodged the caller's limit: %v", err)
	}
}

// A policy whose origin is a member's public URL (by address, or by a
// name that resolves to it) is refused at apply; another port is not.
func TestAPolicyFetchingFromTheClusterIsRefused(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	n := openSession(t, conn, "n1") // public URL http://n1, which resolves nowhere
	openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "n2", PeerAddress: "127.0.0.1:9998", PublicUrl: "http://127.0.0.1:8081"}})
	n.waitEpoch(t, "n1", "n2")
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	for _, origin := range []string{"http://127.0.0.1:8081", "http://localhost:8081/base"} {
		_, err := admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: &pb.CachePolicy{Name: "loop", PathPrefix: "/l/", OriginUrls: []string{origin}}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "n2") || !strings.Contains(err.Error(), "fetch from itself") {
			t.Fatalf("origin %s: %v; want InvalidArgument naming n2", origin, err)
		}
	}
	if _, err := admin.PutPolicy(ctx, &pb.PutPolicyRequest{Policy: &pb.CachePolicy{Name: "fine", PathPrefix: "/f/", OriginUrls: []string{"http://127.0.0.1:8090"}}}); err != nil {
		t.Fatalf("an origin on another port: %v", err)
	}
}

// With --tls-names the replica serves TLS with a certificate its own CA
// issues: a client that trusts the CA's certificate connects and is
// verified for the name; a plaintext client is refused; no node gets a
// peer certificate for one of those names.
func TestTLSIssuedByTheControlPlanesOwnCA(t *testing.T) {
	s, conn := startTLSServer(t, "control.test", "127.0.0.1")
	ctx, cancel := context.WithTimeout(adminCtx(context.Background(), testToken), 10*time.Second)
	defer cancel()
	if _, err := pb.NewAdminServiceClient(conn).ListNodes(ctx, &pb.ListNodesRequest{}); err != nil {
		t.Fatalf("an admin call over TLS verified by the CA: %v", err)
	}
	plain := dial(t, s)
	pctx, pcancel := context.WithTimeout(adminCtx(context.Background(), testToken), 2*time.Second)
	defer pcancel()
	if _, err := pb.NewAdminServiceClient(plain).ListNodes(pctx, &pb.ListNodesRequest{}); err == nil {
		t.Fatal("a plaintext client was served by a TLS listener")
	}
	_, snap := openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "control.test", PeerAddress: "127.0.0.1:1"}, Csr: csrFor(t, "control.test")})
	if snap.GetCertificate().GetError() == "" || len(snap.GetCertificate().GetCertificate()) > 0 {
		t.Fatalf("a node named as the control plane's TLS name got a certificate: %+v", snap.GetCertificate())
	}
}

// GenerateTLS writes files a client verifies the server with.
func TestGenerateTLS(t *testing.T) {
	ca, cert, key, err := GenerateTLS([]string{"shardcache-control", "10.0.0.7"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	for _, name := range []string{"shardcache-control", "10.0.0.7"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Fatalf("the certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other"}); err == nil {
		t.Fatal("the certificate verifies for a name it was not made for")
	}
}

// startTLSServer starts a replica serving TLS as names, with a CA of its
// own, and a client connection that trusts the CA and verifies
// control.test.
func startTLSServer(t *testing.T, names ...string) (*Server, *grpc.ClientConn) {
	t.Helper()
	dir := t.TempDir()
	caPEM, caKeyPEM, err := generateCA()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "ca.key"), caKeyPEM, 0o600)
	s, _, _ := startServer(t, nil, func(c *Config) {
		c.CA = CAConfig{Enabled: true, CertFile: filepath.Join(dir, "ca.crt"), KeyFile: filepath.Join(dir, "ca.key")}
		c.TLS.Names = names
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "control.test"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, conn
}
