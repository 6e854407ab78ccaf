package controlplane

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/shardcache/shardcache/sdk/loopback"
)

// tcpProxy forwards connections to an address until cut.
type tcpProxy struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
	// frozen closes on freeze, gone on cut.
	frozen, gone         chan struct{}
	freezeOnce, goneOnce sync.Once
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	addr, ok := loopback.Addr()
	if !ok {
		t.Fatal("no free port")
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	to := target[len("http://"):]
	p := &tcpProxy{lis: lis, frozen: make(chan struct{}), gone: make(chan struct{})}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.dead {
				c.Close()
				up.Close()
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(gate{up, p}, c); up.Close() }()
			go func() { _, _ = io.Copy(gate{c, p}, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) url() string { return "http://" + p.lis.Addr().String() }

// cut closes the listener and every connection through it.
func (p *tcpProxy) cut() {
	p.goneOnce.Do(func() { close(p.gone) })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead = true
	p.lis.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// freeze keeps every connection through the proxy open but passes nothing
// more on, as a partition that drops packets does, until cut.
func (p *tcpProxy) freeze() { p.freezeOnce.Do(func() { close(p.frozen) }) }

// gate passes writes on to w until its proxy freezes, then holds them
// until the proxy is cut.
type gate struct {
	w io.Writer
	p *tcpProxy
}

func (g gate) Write(b []byte) (int, error) {
	select {
	case <-g.p.frozen:
		<-g.p.gone
		return 0, net.ErrClosed
	default:
		return g.w.Write(b)
	}
}
