package proctest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the main packages pkgs (import paths or relative paths, as
// `go build` takes them) into dir and returns dir. It calls t.Fatal when the
// build fails.
func Build(t testing.TB, dir string, pkgs ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("proctest: go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return dir
}

// Process is a binary run by a test, with its output (stdout and stderr)
// captured line by line. A test may SIGKILL it and start it again
// ([Process.Kill], [Process.Restart]); it is stopped (SIGTERM, then SIGKILL
// after 10 s) when the test ends.
type Process struct {
	path string
	args []string
	env  []string // added to the test's environment, when set

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current incarnation exited
	lines   []string      // every line of every incarnation
	from    int           // first line of the current incarnation
	changed chan struct{} // closed and replaced on each new line
}

// StartProcess starts path with args. It calls t.Fatal when the binary
// cannot start.
func StartProcess(t testing.TB, path string, args ...string) *Process {
	t.Helper()
	p := &Process{path: path, args: args, changed: make(chan struct{})}
	if err := p.start(); err != nil {
		t.Fatalf("natstest: start %s: %v", path, err)
	}
	t.Cleanup(p.Stop)
	return p
}

// StartProcessEnv is [StartProcess] with env (KEY=VALUE entries) added to
// the environment the process inherits from the test.
func StartProcessEnv(t testing.TB, env []string, path string, args ...string) *Process {
	t.Helper()
	p := &Process{path: path, args: args, env: env, changed: make(chan struct{})}
	if err := p.start(); err != nil {
		t.Fatalf("natstest: start %s: %v", path, err)
	}
	t.Cleanup(p.Stop)
	return p
}

func (p *Process) start() error {
	cmd := exec.Command(p.path, p.args...)
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pr.Close()
		_ = pw.Close()
		return err
	}
	_ = pw.Close()
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.from = cmd, done, len(p.lines)
	p.mu.Unlock()
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		_ = pr.Close()
		_ = cmd.Wait()
	}()
	return nil
}

// Pid returns the process ID of the current incarnation.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Done is closed when the current incarnation has exited.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitCode returns the current incarnation's exit code, or -1 while it
// runs or when a signal ended it.
func (p *Process) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig to the current incarnation.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Signal(sig)
}

// Kill SIGKILLs the current incarnation and waits until it has exited.
func (p *Process) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.Done()
}

// Restart starts the binary again with the same arguments, after killing
// the current incarnation if it still runs.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	p.Kill()
	if err := p.start(); err != nil {
		t.Fatalf("natstest: restart %s: %v", p.path, err)
	}
}

// Stop sends SIGTERM, waits up to 10 s, then SIGKILLs.
func (p *Process) Stop() {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Lines returns the lines printed so far by the current incarnation.
func (p *Process) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines[p.from:])
}

// Logs returns the output of every incarnation so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// WaitLog waits until the current incarnation has printed a line
// containing substr and returns that line. It fails the test when the
// process exits first or timeout passes.
func (p *Process) WaitLog(t testing.TB, substr string, timeout time.Duration) string {
	t.Helper()
	line, err := p.waitLog(substr, timeout)
	if err != nil {
		t.Fatalf("natstest: %s: %v\n%s", filepath.Base(p.path), err, p.Logs())
	}
	return line
}

func (p *Process) waitLog(substr string, timeout time.Duration) (string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	seen := -1
	for {
		p.mu.Lock()
		if seen < p.from {
			seen = p.from
		}
		for ; seen < len(p.lines); seen++ {
			if strings.Contains(p.lines[seen], substr) {
				line := p.lines[seen]
				p.mu.Unlock()
				return line, nil
			}
		}
		changed, done := p.changed, p.done
		p.mu.Unlock()
		select {
		case <-changed:
		case <-done:
			p.mu.Lock()
			more := seen < len(p.lines)
			p.mu.Unlock()
			if !more {
				return "", fmt.Errorf("exited before printing %q", substr)
			}
		case <-timer.C:
			return "", fmt.Errorf("no line with %q within %v", substr, timeout)
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proctest: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
