package natstest

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between clients and a server that a test can cut:
// [Proxy.Cut] drops every connection through it and refuses new ones until
// [Proxy.Restore]. A client connected through it sees the network fail
// while the server and its other clients carry on. [Proxy.Stall] makes
// its clients slow readers instead.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	cut     bool
	conns   map[net.Conn]struct{}
	flowing chan struct{} // closed while what the server sends flows
	wg      sync.WaitGroup
}

// NewProxy starts a proxy on 127.0.0.1 (a random port) to target, a
// host:port or a nats:// URL. It is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	if u, ok := cutScheme(target); ok {
		target = u
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: proxy: %v", err)
	}
	flowing := make(chan struct{})
	close(flowing)
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, flowing: flowing}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func cutScheme(url string) (string, bool) {
	const scheme = "nats://"
	if len(url) > len(scheme) && url[:len(scheme)] == scheme {
		return url[len(scheme):], true
	}
	return url, false
}

// URL returns the proxy's client URL, nats://127.0.0.1:<port>.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Cut closes every connection through the proxy and refuses new ones until
// [Proxy.Restore]. It ends a stall.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.resumeLocked()
}

// Stall stops reading what the server sends to the clients through the
// proxy until [Proxy.Resume] (or a cut): to the server, every client is
// a reader that does not keep up; once the sockets' buffers are full, what
// the server sends them piles up in its own, up to its max_pending, past
// which it cuts them as slow consumers.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // stalled already
	}
}

// Resume ends a stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
}

func (p *Proxy) resumeLocked() {
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// waitFlowing returns once what the server sends flows.
func (p *Proxy) waitFlowing() {
	p.mu.Lock()
	flowing := p.flowing
	p.mu.Unlock()
	<-flowing
}

// Restore lets clients connect through the proxy again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// serve pipes one client connection to a new connection to the target.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if tcp, ok := up.(*net.TCPConn); ok {
		// A small buffer of what the server sends: a stall is felt by
		// the server at once, not after megabytes.
		_ = tcp.SetReadBuffer(64 << 10)
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = up.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.forget(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, wait func()) {
		buf := make([]byte, 32<<10)
		for {
			wait()
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break // a cut connection ends here
			}
		}
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c, func() {})
	go pipe(c, up, p.waitFlowing)
	<-done
	<-done
}

func (p *Proxy) forget(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
