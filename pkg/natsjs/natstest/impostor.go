package natstest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Impostor replays an attack on the embedded default (issue 30): after the
// store's server went, another local user listens on its recorded address
// and relays to a NATS server of its own (no authentication, JetStream),
// rewriting every INFO the server sends so that it presents the recorded
// server ID (public: it is in the greeting before authentication) and a
// nonce (so that an nkey client signs it and carries on). Connected counts
// the clients that got as far as sending CONNECT.
type Impostor struct {
	ln     net.Listener
	target string
	id     string

	connected atomic.Int64
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// NewImpostor listens on addr (host:port) and relays to the server at
// target (a host:port or nats:// URL), presenting serverID. It is closed
// when the test ends.
func NewImpostor(t testing.TB, addr, target, serverID string) *Impostor {
	t.Helper()
	if u, ok := cutScheme(target); ok {
		target = u
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("natstest: impostor on %s: %v", addr, err)
	}
	im := &Impostor{ln: ln, target: target, id: serverID, conns: map[net.Conn]struct{}{}}
	im.wg.Add(1)
	go im.accept()
	t.Cleanup(im.Close)
	return im
}

// Connected returns how many clients sent CONNECT through the impostor:
// clients that took it for the store's server.
func (im *Impostor) Connected() int64 { return im.connected.Load() }

// Close stops the impostor and waits for its goroutines.
func (im *Impostor) Close() {
	_ = im.ln.Close()
	im.mu.Lock()
	for c := range im.conns {
		_ = c.Close()
	}
	im.mu.Unlock()
	im.wg.Wait()
}

func (im *Impostor) track(c net.Conn) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.conns[c] = struct{}{}
}

func (im *Impostor) accept() {
	defer im.wg.Done()
	for {
		c, err := im.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", im.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		im.track(c)
		im.track(s)
		im.wg.Add(2)
		go func() {
			defer im.wg.Done()
			defer c.Close()
			defer s.Close()
			im.rewrite(c, s)
		}()
		go func() {
			defer im.wg.Done()
			defer c.Close()
			defer s.Close()
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadBytes('\n')
				if len(line) > 0 {
					if bytes.HasPrefix(bytes.ToUpper(line), []byte("CONNECT ")) {
						im.connected.Add(1)
					}
					if _, werr := s.Write(line); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// rewrite copies the server's stream to the client, rewriting each INFO.
func (im *Impostor) rewrite(c, s net.Conn) {
	r := bufio.NewReader(s)
	for {
		line, err := r.ReadBytes('\n')
		if bytes.HasPrefix(line, []byte("INFO ")) {
			var info map[string]any
			if json.Unmarshal(bytes.TrimSpace(line[5:]), &info) == nil {
				info["server_id"] = im.id
				info["nonce"] = "impostor-nonce"
				if b, merr := json.Marshal(info); merr == nil {
					line = append(append([]byte("INFO "), b...), '\r', '\n')
				}
			}
		}
		if len(line) > 0 {
			if _, werr := c.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
