package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Status is the verdict on one mutation.
type Status string

// The verdicts.
const (
	Killed   Status = "killed"   // a test failed
	Survived Status = "SURVIVED" // every test passed
	Stale    Status = "STALE"    // the text to mutate is missing or not unique
	Broken   Status = "BROKEN"   // the mutated code does not build
)

type outcome struct {
	m      Mutation
	line   int
	status Status
	detail string // the first failing test, or why the mutation is stale or broken
	took   time.Duration
}

func main() {
	list := flag.String("list", "internal/mutate/mutations.yaml", "the list of mutations")
	only := flag.String("run", "", "run only the mutations whose name matches this regular expression")
	parallel := flag.Int("parallel", 2, "mutations tested at once")
	timeout := flag.Duration("timeout", 5*time.Minute, "go test -timeout of each run")
	verbose := flag.Bool("v", false, "print the test output of surviving and broken mutations")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Stdout, *list, *only, *parallel, *timeout, *verbose))
}

func run(ctx context.Context, w io.Writer, listPath, only string, parallel int, timeout time.Duration, verbose bool) int {
	l, err := loadList(listPath)
	if err != nil {
		fmt.Fprintln(w, "mutate:", err)
		return 2
	}
	var filter *regexp.Regexp
	if only != "" {
		if filter, err = regexp.Compile(only); err != nil {
			fmt.Fprintln(w, "mutate: -run:", err)
			return 2
		}
	}
	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		fmt.Fprintln(w, "mutate:", err)
		return 2
	}
	defer os.RemoveAll(tmp)

	// The unmutated tree must pass, or every mutation would look killed.
	fmt.Fprintf(w, "mutate: baseline: go test %s\n", strings.Join(l.Packages, " "))
	if ok, out := goTest(ctx, "", l.Packages, timeout); !ok {
		fmt.Fprintf(w, "mutate: the tests fail without any mutation:\n%s", out)
		return 2
	}

	var todo []Mutation
	for _, m := range l.Mutations {
		if filter == nil || filter.MatchString(m.Name) {
			todo = append(todo, m)
		}
	}
	results := make([]outcome, len(todo))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, m := range todo {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			o := try(ctx, tmp, i, m, l.Packages, timeout)
			results[i] = o
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "%-8s %-60s %s:%d  %s (%s)\n", o.status, m.Name, m.File, o.line, firstLine(o.detail), o.took.Round(100*time.Millisecond))
			if verbose && (o.status == Survived || o.status == Broken) {
				fmt.Fprintln(w, o.detail)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Fprintln(w, "mutate: interrupted")
		return 2
	}
	counts := map[Status]int{}
	for _, o := range results {
		counts[o.status]++
	}
	fmt.Fprintf(w, "mutate: %d mutations: %d killed, %d survived, %d stale, %d broken\n",
		len(results), counts[Killed], counts[Survived], counts[Stale], counts[Broken])
	if counts[Survived]+counts[Stale]+counts[Broken] > 0 {
		return 1
	}
	return 0
}

// try applies one mutation through an overlay and runs the tests.
func try(ctx context.Context, tmp string, i int, m Mutation, pkgs []string, timeout time.Duration) (o outcome) {
	start := time.Now()
	o.m = m
	defer func() { o.took = time.Since(start) }()
	abs, err := filepath.Abs(m.File)
	if err != nil {
		o.status, o.detail = Broken, err.Error()
		return o
	}
	src, err := os.ReadFile(abs)
	if err != nil {
		o.status, o.detail = Stale, err.Error()
		return o
	}
	mutated, line, err := m.apply(src)
	o.line = line
	if err != nil {
		o.status, o.detail = Stale, err.Error()
		return o
	}
	dir := filepath.Join(tmp, fmt.Sprint(i))
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: a scratch overlay of source files for go build
		o.status, o.detail = Broken, err.Error()
		return o
	}
	file := filepath.Join(dir, filepath.Base(abs))
	overlay := filepath.Join(dir, "overlay.json")
	doc, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: file}})
	if err := errors.Join(os.WriteFile(file, mutated, 0o644), os.WriteFile(overlay, doc, 0o644)); err != nil { //nolint:gosec // G306: a mutated source file and its overlay, as readable as the source
		o.status, o.detail = Broken, err.Error()
		return o
	}
	ok, out := goTest(ctx, overlay, pkgs, timeout)
	switch {
	case ok:
		o.status, o.detail = Survived, "no test failed\n"+out
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]"):
		o.status, o.detail = Broken, "does not build\n"+out
	default:
		o.status, o.detail = Killed, "by "+failedTest(out)
	}
	return o
}

// goTest runs the packages' tests (with the overlay, if any), failing fast.
func goTest(ctx context.Context, overlay string, pkgs []string, timeout time.Duration) (bool, string) {
	args := []string{"test", "-count=1", "-failfast", "-timeout", timeout.String()}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failedTest names the first failing test in go test's output.
func failedTest(out string) string {
	if m := failRE.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL") || strings.Contains(l, "panic:") {
			return strings.TrimSpace(l)
		}
	}
	return "a failing run"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
