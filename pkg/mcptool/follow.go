package mcptool

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/tool"
)

// Following a server's tool set (notifications/tools/list_changed).
const (
	// MaxTools is how many tools (after the allow-list) a server may list:
	// a listing with more is refused (at start, the server's error; after
	// a change, the tools served stay as they were).
	MaxTools = 500
	// relistEvery is the least time between two listings that follow
	// notifications: a storm of them costs one tools/list a second.
	relistEvery = time.Second
	// hostTimeout bounds what the host does for one change.
	hostTimeout = 30 * time.Second
)

// Host serves the tools of MCP servers while it runs: the worker
// (worker.Worker's Serve and Retire). Serve adds a tool or replaces the
// one of the same name; Retire stops serving one.
type Host interface {
	Serve(ctx context.Context, t *tool.Tool) error
	Retire(ctx context.Context, name string) error
}

// names are the offload tool names of a worker and who serves each: the
// tools it was started with, then those a server's change added. A server
// serves a new tool only under a name nobody has, so that a server cannot
// take another's tool (or a command tool) by listing its name.
type names struct {
	mu    sync.Mutex
	owner map[string]string // offload name → the server's name, "" for a tool not an MCP server's
}

// take gives name to server unless another has it; it reports whether
// server has it now.
func (n *names) take(name, server string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if o, ok := n.owner[name]; ok {
		return o == server
	}
	n.owner[name] = server
	return true
}

// release frees name, if server has it.
func (n *names) release(name, server string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.owner[name] == server {
		delete(n.owner, name)
	}
}

// Follow makes the worker h serve the changes of every server's tools
// from now on: after a notifications/tools/list_changed (or a restart of
// the server), the server's tools are listed again and each new tool is
// served (h.Serve: advertised, its own consumer), each changed one served
// anew, each gone retired (h.Retire). served are the names of every tool
// h serves now (those of [Servers.Tools] and the worker's others): a
// server's new tool whose name is taken is not served. Listings are
// debounced (one a second at most) and capped ([MaxTools]); a new tool
// whose name is refused (tool.NamePattern) is left out, logged, as is
// one that cannot be built. The changes made since [Servers.Tools] are
// applied at once.
func (ss *Servers) Follow(h Host, served []string) {
	if ss == nil {
		return
	}
	n := &names{owner: make(map[string]string, len(served))}
	for _, name := range served {
		n.owner[name] = ""
	}
	for _, s := range ss.list {
		s.mu.Lock()
		for _, name := range s.served.names() {
			n.owner[name] = s.cfg.Name
		}
		s.mu.Unlock()
	}
	for _, s := range ss.list {
		s.follow(h, n)
	}
}

// servedSet is what a server's host serves of it: per MCP tool name, the
// offload name and the listing it was built from.
type servedSet map[string]servedTool

type servedTool struct {
	name    string // offload name
	listing string // the tool as listed (JSON)
}

func (ss servedSet) names() []string {
	out := make([]string, 0, len(ss))
	for _, t := range ss {
		out = append(out, t.name)
	}
	return out
}

// listing is t as listed, to tell a change.
func listing(t mcpTool) string {
	b, _ := json.Marshal(t)
	return string(b)
}

// follow starts following for host h.
func (s *Server) follow(h Host, n *names) {
	s.mu.Lock()
	s.host, s.names = h, n
	s.mu.Unlock()
	s.relist()
}

// relist asks the follower to list the tools again.
func (s *Server) relist() {
	select {
	case s.kick <- struct{}{}:
	default: // asked already
	}
}

// follower lists the server's tools again when asked (a notification, a
// restart, Follow), at most once every relistEvery and listChangedWait
// after the first ask (the asks meanwhile coalesced), and hands the
// changes to the host. It is the only one to call the host.
func (s *Server) follower() {
	defer s.wg.Done()
	var last time.Time
	for {
		select {
		case <-s.kick:
		case <-s.ctx.Done():
			return
		}
		wait := max(listChangedWait, relistEvery-time.Since(last))
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			return
		}
		select {
		case <-s.kick: // coalesced
		default:
		}
		last = time.Now()
		ctx, cancel := context.WithTimeout(s.ctx, connectTimeout)
		if err := s.listAgain(ctx); err != nil {
			s.log.Warn("tools/list after tools/list_changed failed; the tools served stay as they were", slog.Any("error", err))
		}
		cancel()
		hctx, cancel := context.WithTimeout(s.ctx, hostTimeout)
		s.apply(hctx)
		cancel()
	}
}

// listAgain lists the tools on the live connection and records them.
func (s *Server) listAgain(ctx context.Context) error {
	c, err := s.current(ctx)
	if err != nil {
		return err
	}
	tools, err := s.list(ctx, c)
	if err != nil {
		return err
	}
	s.noteTools(tools)
	return nil
}

// apply hands the host the differences between the tools listed and those
// it serves.
func (s *Server) apply(ctx context.Context) {
	s.mu.Lock()
	h, n := s.host, s.names
	listed := append([]mcpTool(nil), s.listed...)
	s.mu.Unlock()
	if h == nil {
		return
	}
	seen := make(map[string]bool, len(listed))
	for _, t := range listed {
		seen[t.Name] = true
		l := listing(t)
		s.mu.Lock()
		was, ok := s.served[t.Name]
		s.mu.Unlock()
		if ok && was.listing == l {
			continue
		}
		ot, err := s.newTool(t)
		if err != nil {
			s.log.Warn("a tool the server lists is not served", slog.String("tool", t.Name), slog.Any("error", err))
			continue
		}
		if !ok && !n.take(ot.Name, s.cfg.Name) {
			s.log.Warn("a tool the server lists is not served: another tool of the worker has its name", slog.String("tool", t.Name), slog.String("name", ot.Name))
			continue
		}
		if err := h.Serve(ctx, ot); err != nil {
			if !ok {
				n.release(ot.Name, s.cfg.Name)
			}
			s.log.Warn("a tool the server lists could not be served", slog.String("tool", t.Name), slog.Any("error", err))
			continue
		}
		s.mu.Lock()
		s.served[t.Name] = servedTool{name: ot.Name, listing: l}
		s.mu.Unlock()
		if ok {
			s.log.Info("mcp tool changed", slog.String("tool", t.Name), slog.String("name", ot.Name))
		} else {
			s.log.Info("mcp tool added", slog.String("tool", t.Name), slog.String("name", ot.Name))
		}
	}
	s.mu.Lock()
	var gone []string
	for mcpName := range s.served {
		if !seen[mcpName] {
			gone = append(gone, mcpName)
		}
	}
	s.mu.Unlock()
	for _, mcpName := range gone {
		s.mu.Lock()
		st := s.served[mcpName]
		s.mu.Unlock()
		if err := h.Retire(ctx, st.name); err != nil {
			s.log.Warn("a tool the server no longer lists is still served", slog.String("tool", mcpName), slog.Any("error", err))
			continue
		}
		n.release(st.name, s.cfg.Name)
		s.mu.Lock()
		delete(s.served, mcpName)
		s.mu.Unlock()
		s.log.Info("mcp tool retired", slog.String("tool", mcpName), slog.String("name", st.name))
	}
}

// tooMany is the error of a listing over MaxTools.
func tooMany(n int) error {
	return fmt.Errorf("the server lists %d tools, more than %d: name those to serve in the tools: allow-list", n, MaxTools)
}
