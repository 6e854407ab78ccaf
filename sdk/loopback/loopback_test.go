package loopback

import (
	"net"
	"strconv"
	"testing"
)

func TestAddrIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		addr, ok := Addr()
		if !ok {
			t.Fatal("no free address")
		}
		host, port, err := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if err != nil || host != "127.0.0.1" || p < 20000 || p > 31999 {
			t.Fatalf("Addr() = %q; want 127.0.0.1 and a port in 20000-31999", addr)
		}
		if seen[addr] {
			t.Fatalf("Addr() returned %s twice in a row of 20", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the address Addr() returned cannot be bound: %v", err)
		}
		l.Close()
	}
}

func TestOnly(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:80": true, "127.0.0.2:80": true, "[::1]:80": true, "localhost:80": true,
		"0.0.0.0:80": false, ":80": false, "[::]:80": false, "10.0.0.1:80": false, "node-1:80": false, "127.0.0.1": false} {
		if got := Only(addr); got != want {
			t.Errorf("Only(%q) = %v, want %v", addr, got, want)
		}
	}
}
