package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// dockerStage is one stage of deploy/Dockerfile.
type dockerStage struct {
	base  string
	instr [][2]string // instruction, rest of the line
}

// TestDockerfile: the images are multi-stage, static (CGO off, distroless
// static: no shell), non-root, built from the cmd/ packages, and their
// entrypoints and default flags exist in the binaries.
func TestDockerfile(t *testing.T) {
	agentBin, workerBin := binaries(t)
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]*dockerStage{}
	var cur *dockerStage
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		if instr == "FROM" {
			f := strings.Fields(rest)
			if len(f) != 3 || f[1] != "AS" {
				t.Fatalf("FROM %s: want FROM <image> AS <stage>", rest)
			}
			cur = &dockerStage{base: f[0]}
			stages[f[2]] = cur
			continue
		}
		if cur == nil {
			t.Fatalf("%s before FROM", line)
		}
		cur.instr = append(cur.instr, [2]string{instr, rest})
	}
	build := stages["build"]
	if build == nil {
		t.Fatal("no build stage")
	}
	goVersion := moduleVersion(t, "go")
	if want := "golang:" + goVersion[:strings.LastIndex(goVersion, ".")]; build.base != want {
		t.Errorf("build stage FROM %s, want %s (go.mod's go %s)", build.base, want, goVersion)
	}
	built := ""
	for _, in := range build.instr {
		if in[0] == "ENV" && !strings.Contains(in[1], "CGO_ENABLED=0") {
			t.Errorf("ENV %s: CGO must be off for static binaries", in[1])
		}
		if in[0] == "RUN" && strings.HasPrefix(in[1], "go build") {
			built = in[1]
		}
	}
	for name, bin := range map[string]string{"agent": agentBin, "toolworker": workerBin} {
		if !strings.Contains(built, "./cmd/"+name) {
			t.Errorf("the build stage does not build ./cmd/%s: %q", name, built)
		}
		if src, err := os.ReadFile("../cmd/" + name + "/main.go"); err != nil || !bytes.Contains(src, []byte("package main")) {
			t.Errorf("cmd/%s is not a main package: %v", name, err)
		}
		s := stages[name]
		if s == nil {
			t.Errorf("no stage (target) %s", name)
			continue
		}
		if !strings.HasPrefix(s.base, "gcr.io/distroless/static") {
			t.Errorf("stage %s FROM %s: want distroless/static (no shell)", name, s.base)
		}
		var entry, cmd []string
		user, copied := "", false
		for _, in := range s.instr {
			switch in[0] {
			case "RUN":
				t.Errorf("stage %s runs %q: the final image has no shell", name, in[1])
			case "USER":
				user = in[1]
			case "COPY":
				copied = copied || in[1] == "--from=build /out/"+name+" /"+name
			case "ENTRYPOINT":
				if err := json.Unmarshal([]byte(in[1]), &entry); err != nil {
					t.Errorf("stage %s ENTRYPOINT %s: want the exec (JSON) form: %v", name, in[1], err)
				}
			case "CMD":
				if err := json.Unmarshal([]byte(in[1]), &cmd); err != nil {
					t.Errorf("stage %s CMD %s: want the exec (JSON) form: %v", name, in[1], err)
				}
			}
		}
		if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
			t.Errorf("stage %s runs as %q, want a non-root user", name, user)
		}
		if !copied || !slices.Equal(entry, []string{"/" + name}) {
			t.Errorf("stage %s: copied %v, entrypoint %v; want /%s from the build stage", name, copied, entry, name)
		}
		helpArgs := []string{"-h"}
		if name == "agent" {
			helpArgs = []string{"--help"}
		}
		flags, _ := helpFlags(t, bin, helpArgs...)
		parseArgs(t, cmd, flags)
	}
	// The README builds the images the manifests use.
	readme, _ := os.ReadFile("README.md")
	for _, target := range []string{"agent", "toolworker"} {
		want := fmt.Sprintf("docker build -f deploy/Dockerfile --target %s -t offload-%s:dev .", target, target)
		if !strings.Contains(string(readme), want) || !strings.Contains(string(data), want) {
			t.Errorf("deploy/README.md or the Dockerfile lacks %q", want)
		}
	}
}
