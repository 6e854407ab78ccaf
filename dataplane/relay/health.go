package relay

import (
	"bufio"
	"context"
	"net/http"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/internal/h1client"
)

// A keep-alive connection has no pings (HTTP/2 has, and the HTTP/2 class
// sends them): a peer that was paused (SIGSTOP) or cut off still
// accepts connections in its kernel and never answers, and an exchange
// would wait the whole relay timeout. So an answer that has not begun
// after probeAfter makes the client ask the peer, on a connection of its
// own, for the cheapest thing every peer listener answers (its hottest
// key). Any answer, a refusal included, says the peer is alive: the slow
// answer is the origin's. No answer within PingTimeout closes every
// keep-alive connection to the peer, so the exchanges waiting on them fail
// now and count against its breaker, as on HTTP/2.

// silent starts a health probe of pc, unless one runs or ran within the
// last probe timeout.
func (c *Client) silent(pc *peerConns) {
	p := c.pools
	p.mu.Lock()
	now := p.now()
	if pc.gone || pc.probing || now.Sub(pc.lastProbe) < c.pingTimeout {
		p.mu.Unlock()
		return
	}
	pc.probing, pc.lastProbe = true, now
	p.mu.Unlock()
	c.probes.Go(func() {
		alive := c.answers(pc.addr)
		p.mu.Lock()
		pc.probing = false
		p.mu.Unlock()
		if !alive && c.ctx.Err() == nil {
			c.probeFailed.Add(1)
			p.closeAll(pc)
		}
	})
}

// answers reports whether the peer at addr answers a request within the
// probe timeout.
func (c *Client) answers(addr string) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.pingTimeout)
	defer cancel()
	nc, err := c.dialH1(ctx, addr)
	if err != nil {
		return false
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(h1client.ALongTimeAgo) })
	defer stop()
	bw := bufio.NewWriter(nc)
	bw.WriteString("GET / HTTP/1.1\r\nHost: " + addr + "\r\n" + hop.Marker + ": health-probe\r\n" +
		hop.HotKeysField + ": 1\r\nConnection: close\r\n\r\n")
	if bw.Flush() != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
