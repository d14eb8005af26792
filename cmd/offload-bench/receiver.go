package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/offload-dev/offload/internal/otlprecv"
)

// The tracing section's OTLP receiver runs in a child process (this binary
// with -otlp-receive), as a collector would run outside the traced
// process: its CPU is measured apart (receiverProcess.cpu) rather than
// mixed into the agent's and worker's.

// receive runs a discarding OTLP/HTTP receiver until stdin closes: it
// prints its endpoint first, and on the way out how many export requests
// it read and their bytes.
func receive() error {
	recv, err := otlprecv.StartDiscard(context.Background())
	if err != nil {
		return err
	}
	fmt.Println(recv.Endpoint())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent is done
	n, size := recv.Exports()
	fmt.Println(n, size)
	return recv.Close()
}

// receiverProcess is the child process running the receiver.
type receiverProcess struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stdout   *bufio.Reader
	endpoint string
}

// startReceiver starts the receiver's child process.
func startReceiver(ctx context.Context) (*receiverProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-otlp-receive")
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
	p := &receiverProcess{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	line, err := p.stdout.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		p.stop()
		return nil, fmt.Errorf("receiver process did not start (%q): %v", line, err) //nolint:errorlint // err may be nil (the line was wrong)
	}
	p.endpoint = strings.TrimSpace(line)
	return p, nil
}

// cpu returns the CPU time the receiver's process has used.
func (p *receiverProcess) cpu() time.Duration { return procCPU(p.cmd.Process.Pid) }

// stop ends the child process and returns the export requests it read and
// their bytes (zero if it could not say).
func (p *receiverProcess) stop() (exports int, size int64) {
	_ = p.stdin.Close()
	_, _ = fmt.Fscan(p.stdout, &exports, &size)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	return exports, size
}
