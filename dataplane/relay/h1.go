package relay

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"

	"github.com/shardcache/shardcache/dataplane/internal/h1client"
)

// roundTripH1 relays req over a keep-alive connection to req.URL.Host.
// It returns errAtBound, having sent nothing, when every connection the
// peer may have is busy. An exchange on a reused connection that failed
// before the peer sent a byte (it may have closed the connection while
// idle) is sent again, once, on a new one: relayed requests have no body
// and are GET or HEAD, so sending one twice changes nothing.
func (c *Client) roundTripH1(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		cn, err := c.pools.get(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := h1client.Do(ctx, &cn.Conn, req, cn)
		if err == nil {
			return resp, nil
		}
		held := c.pools.discard(cn)
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%w (%w)", cerr, err)
		}
		// Nothing back on a reused connection is a peer that closed it
		// while idle: sent again once, on a new one. Not when the health
		// probe cut it off (the pool no longer held it): the peer is
		// silent, and a new connection would only wait for a second probe.
		if !errors.Is(err, h1client.ErrNothingBack) || !cn.Reused || !held || attempt > 0 {
			return nil, err
		}
	}
}

// Awaiting starts the probe: a peer that sends nothing for a while is
// asked whether it answers at all (health.go), so that a paused or
// partitioned peer is noticed within seconds, not after the relay
// timeout.
func (cn *conn) Awaiting() { cn.probe.Reset(cn.pools.probeAfter) }

// Arrived stops the probe: the peer answers.
func (cn *conn) Arrived() { cn.probe.Stop() }

// Awaited stops the probe, if the answer's first byte never came.
func (cn *conn) Awaited(err error) error {
	cn.probe.Stop()
	return err
}

// End returns the connection to its pool, or closes it.
func (cn *conn) End(reuse bool) {
	if reuse {
		cn.pools.put(cn)
	} else {
		cn.pools.discard(cn)
	}
}

// WriteRequest writes a relayed request's header: the request line, Host
// and the fields (checked by checkHeader before). Relayed requests have no
// body.
func (*conn) WriteRequest(bw *bufio.Writer, req *http.Request) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	for k, vs := range req.Header {
		if skipped(k) {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	return bw.Flush()
}
