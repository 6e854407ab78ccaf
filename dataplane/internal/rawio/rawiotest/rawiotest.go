// Package rawiotest gives tests a connected TCP pair on loopback whose
// first side is a rawio connection.
package rawiotest

import (
	"net"
	"testing"

	"github.com/shardcache/shardcache/dataplane/internal/rawio"
)

// Pair is a connected TCP pair on loopback: a dialled by rawio.Dial, b
// package net's as accepted. Both close when the test ends.
func Pair(t testing.TB) (*rawio.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := rawio.Dial(&net.Dialer{})(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	c, ok := a.(*rawio.Conn)
	if !ok {
		t.Fatalf("rawio.Dial returned a %T, not a *rawio.Conn", a)
	}
	return c, b
}
