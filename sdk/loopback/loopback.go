// Package loopback hands out loopback addresses for servers that a program
// or test starts and that bind their port later.
package loopback

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
)

// counter spreads consecutive calls over the range.
var counter atomic.Int32

// Addr returns a 127.0.0.1 address whose port is free right now. Ports come
// from 20000-31999, below the kernel's ephemeral range (32768 and up), so an
// outgoing connection can never take one between this check and the bind.
// Each process starts at its own offset, so that concurrent test binaries
// rarely meet. ok is false when the whole range is taken.
func Addr() (addr string, ok bool) {
	base := (os.Getpid() % 600) * 20
	for range 12000 {
		port := 20000 + (base+int(counter.Add(1)))%12000
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr, true
	}
	return "", false
}

// Only reports whether addr (host:port) listens on a loopback address, or
// "localhost": reachable from this machine only. An unspecified host
// ("0.0.0.0", ":80") is every interface, not loopback.
func Only(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
