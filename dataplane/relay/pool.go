package relay

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/h1client"
)

// The keep-alive class: HTTP/1.1 connections to each peer, each carrying
// one exchange at a time, written and read by the goroutine that relays.
// No goroutine per connection and no frame scheduler sit between a
// relayed request and the wire, so an exchange costs a round-trip and
// never waits behind another's frames.

// errAtBound is returned by get when a peer has MaxConnsPerPeer
// connections open, all busy: the request rides the HTTP/2 class.
var errAtBound = errors.New("relay: every keep-alive connection to the peer is busy")

// Buffer sizes of a keep-alive connection. The read buffer holds a small
// answer whole with its header, so that reading it is one system call; a
// bulk body bypasses it (reads larger than the buffer go to the socket).
const (
	readBuffer  = 16 << 10
	writeBuffer = 4 << 10
)

// pools holds the keep-alive connections of every peer.
type pools struct {
	max     int           // connections per peer, busy or idle
	idleFor time.Duration // an idle connection older than this is closed, not reused
	dial    func(ctx context.Context, addr string) (net.Conn, error)
	now     func() time.Time
	// silent is called when an exchange on a connection to pc has
	// waited probeAfter for the answer's first byte.
	silent     func(pc *peerConns)
	probeAfter time.Duration

	mu    sync.Mutex
	peers map[string]*peerConns
}

// peerConns are one peer's connections. Guarded by pools.mu.
type peerConns struct {
	addr  string
	conns map[*conn]struct{} // every open connection, busy or idle
	idle  []*conn            // most recently used last
	gone  bool               // dropped from the pools: connections returned are closed
	// probing is set while a health probe of the peer runs; lastProbe
	// spaces them (see health.go).
	probing   bool
	lastProbe time.Time
}

// conn is one keep-alive connection.
type conn struct {
	h1client.Conn
	pools  *pools
	peer   *peerConns
	idleAt time.Time   // when it was last returned to the pool
	probe  *time.Timer // runs silent while an answer is awaited too long
}

func newPools(max int, idleFor time.Duration, dial func(context.Context, string) (net.Conn, error), silent func(*peerConns)) *pools {
	return &pools{max: max, idleFor: idleFor, dial: dial, silent: silent, probeAfter: probeAfter, now: time.Now, peers: map[string]*peerConns{}}
}

// peerLocked returns addr's connections, made on first use.
func (p *pools) peerLocked(addr string) *peerConns {
	pc := p.peers[addr]
	if pc == nil {
		pc = &peerConns{addr: addr, conns: map[*conn]struct{}{}}
		p.peers[addr] = pc
	}
	return pc
}

// get returns an idle connection to addr, else a new one while the peer
// has fewer than max open, else errAtBound.
func (p *pools) get(ctx context.Context, addr string) (*conn, error) {
	var stale []*conn
	defer func() {
		for _, c := range stale {
			c.NC.Close()
		}
	}()
	p.mu.Lock()
	pc := p.peerLocked(addr)
	now := p.now()
	for len(pc.idle) > 0 {
		c := pc.idle[len(pc.idle)-1]
		pc.idle[len(pc.idle)-1] = nil
		pc.idle = pc.idle[:len(pc.idle)-1]
		if now.Sub(c.idleAt) > p.idleFor {
			delete(pc.conns, c)
			stale = append(stale, c)
			continue
		}
		p.mu.Unlock()
		c.Reused = true
		return c, nil
	}
	if len(pc.conns) >= p.max {
		p.mu.Unlock()
		return nil, errAtBound
	}
	c := &conn{pools: p, peer: pc}
	pc.conns[c] = struct{}{} // holds the place while it dials
	p.mu.Unlock()
	nc, err := p.dial(ctx, addr)
	if err != nil {
		p.mu.Lock()
		delete(pc.conns, c)
		p.mu.Unlock()
		return nil, err
	}
	c.NC = nc
	c.BR = bufio.NewReaderSize(nc, readBuffer)
	c.BW = bufio.NewWriterSize(nc, writeBuffer)
	c.probe = time.AfterFunc(time.Hour, func() { p.silent(pc) })
	c.probe.Stop()
	return c, nil // if the peer left the ring meanwhile, put closes it
}

// put returns a connection whose exchange ended cleanly to the pool.
func (p *pools) put(c *conn) {
	p.mu.Lock()
	if c.peer.gone {
		p.mu.Unlock()
		p.discard(c)
		return
	}
	if _, open := c.peer.conns[c]; !open { // closed by a failed health probe
		p.mu.Unlock()
		c.NC.Close()
		return
	}
	c.idleAt = p.now()
	c.peer.idle = append(c.peer.idle, c)
	p.mu.Unlock()
}

// discard closes a connection that cannot carry another exchange. It
// reports whether the pool still held it: false when closeAll cut it off
// first (its peer found silent).
func (p *pools) discard(c *conn) (held bool) {
	p.mu.Lock()
	_, held = c.peer.conns[c]
	delete(c.peer.conns, c)
	p.mu.Unlock()
	if c.NC != nil {
		c.NC.Close()
	}
	return held
}

// closeAll closes every connection to pc, busy ones included: their
// exchanges fail at once. The peer keeps its place in the pools.
func (p *pools) closeAll(pc *peerConns) {
	p.mu.Lock()
	var all []*conn
	for c := range pc.conns {
		if c.NC != nil {
			all = append(all, c)
		}
		delete(pc.conns, c)
	}
	pc.idle = nil
	p.mu.Unlock()
	for _, c := range all {
		c.NC.Close()
	}
}

// closeIdle closes every idle connection.
func (p *pools) closeIdle() {
	p.mu.Lock()
	var idle []*conn
	for _, pc := range p.peers {
		idle = pc.takeIdleLocked(idle)
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.NC.Close()
	}
}

// keep drops the peers whose address keep does not hold, closing their
// connections (busy ones as their exchanges end): the pools hold no more
// peers than the ring has, beside those relayed to since.
func (p *pools) keep(keep func(addr string) bool) {
	p.mu.Lock()
	var idle []*conn
	for addr, pc := range p.peers {
		if keep(addr) {
			continue
		}
		pc.gone = true
		delete(p.peers, addr)
		idle = pc.takeIdleLocked(idle)
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.NC.Close()
	}
}

// takeIdleLocked removes pc's idle connections from it and appends them
// to to, for the caller to close once the lock is released.
func (pc *peerConns) takeIdleLocked(to []*conn) []*conn {
	for _, c := range pc.idle {
		delete(pc.conns, c)
		to = append(to, c)
	}
	pc.idle = nil
	return to
}

// open reports the connections open to addr and how many are idle.
func (p *pools) open(addr string) (open, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.peers[addr]; pc != nil {
		return len(pc.conns), len(pc.idle)
	}
	return 0, 0
}
