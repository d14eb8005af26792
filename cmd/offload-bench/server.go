package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/embedded"
)

// The nats-server runs in a child process (this binary with -serve), so
// that the bench process holds only the agent and worker sides: its heap
// and RSS are theirs, not the server's stream caches and buffer pools.

// serve runs the embedded server for store until stdin closes.
func serve(store string) error {
	if path := os.Getenv("OFFLOAD_BENCH_SERVER_CPUPROFILE"); path != "" {
		f, err := os.Create(path) //nolint:gosec // G703: the path the operator names, as for -cpuprofile
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes away
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

// serverProcess is the child process running the server.
type serverProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	srv   *embedded.Server
	nc    *nats.Conn          // the bench's own connection, for the streams' states
	js    jetstream.JetStream // … on nc
}

// startServer starts the child process for store and connects to its
// server as the store's user.
func startServer(ctx context.Context, store string) (*serverProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-serve", store)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProcess{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		p.stop()
		return nil, fmt.Errorf("server process did not start (%q): %v", line, err) //nolint:errorlint // err may be nil (the line was wrong), which %w would print as %!w(<nil>)
	}
	// The store's server is running: this handle shares it.
	p.srv, err = embedded.Start(ctx, embedded.Config{StoreDir: store, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		p.nc, err = endpoint{url: p.srv.URL(), nkey: p.srv.NkeySeedFile()}.connect("bench stats")
	}
	if err == nil {
		p.js, err = jetstream.New(p.nc)
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// storedStreams are the streams whose stored messages stored counts: a
// call's task, its result and its ledger entry.
var storedStreams = [3]string{"TOOLS_TASKS", "TOOLS_RESULTS", "KV_tools_effects"}

// stored returns the last sequence of each of storedStreams (0 for one
// not provisioned, or a nil p): the messages each has stored so far.
func (p *serverProcess) stored(ctx context.Context) [3]uint64 {
	var out [3]uint64
	if p == nil || p.js == nil {
		return out
	}
	for i, name := range storedStreams {
		if s, err := p.js.Stream(ctx, name); err == nil {
			out[i] = s.CachedInfo().State.LastSeq
		}
	}
	return out
}

// stop ends the child process and waits for it.
func (p *serverProcess) stop() {
	if p.nc != nil {
		p.nc.Close()
	}
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
