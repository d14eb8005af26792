# offload — see README.md.
.DEFAULT_GOAL := help
SHELL := /bin/bash

GO          ?= go
GOBIN       ?= $(CURDIR)/.bin
GOLANGCI    := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
VULNDB      ?= https://vuln.go.dev
NATSCLI     := github.com/nats-io/natscli/nats@v0.5.0
NATSSERVER  := github.com/nats-io/nats-server/v2@v2.15.2
PROMPT      ?= Ship the release.
FUZZTIME    ?= 20s
BENCH_FLAGS ?=
export GOTOOLCHAIN ?= local

.PHONY: help
help: ## Show this help
	@if [ -t 1 ]; then on=$$'\033[36m'; off=$$'\033[0m'; fi; \
	grep -hE '^[a-zA-Z/_-]+:.*?## ' $(MAKEFILE_LIST) | awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*?## "}; {printf "  %s%-12s%s %s\n", on, $$1, off, $$2}'

.PHONY: build
build: ## Build bin/agent and bin/toolworker
	$(GO) build -o bin/ ./cmd/...

.PHONY: run
run: ## Demo: background tasks, an approval, a person's answer, a resume (scripted model unless OPENAI_API_KEY is set)
	$(GO) build -o bin/agent ./cmd/agent
	AGENT="$(CURDIR)/bin/agent" PROMPT="$(PROMPT)" examples/demo/demo.sh

.PHONY: test
test: $(GOBIN)/nats ## Run all tests with the race detector (installs the nats CLI for end-to-end tests)
	PATH="$(GOBIN):$$PATH" OFFLOAD_REQUIRE_NATS_CLI=1 $(GO) test -race -timeout 15m ./...

.PHONY: test/short
test/short: ## Run the tests without the race detector and without end-to-end tests
	$(GO) test -short ./...

.PHONY: test/cluster
test/cluster: ## Cluster tests alone, verbose (3 nats-server processes on loopback; node SIGKILLed under 500 tasks; figures printed)
	$(GO) test -race -run '^TestCluster' -count=1 -v -timeout 10m ./deploy/

.PHONY: cluster/up
cluster/up: $(GOBIN)/nats-server ## Start a 3-node NATS cluster on loopback (deploy/nats/cluster; needs the OFFLOAD_*_PASSWORD variables)
	NATS_SERVER=$(GOBIN)/nats-server deploy/nats/cluster/cluster.sh start

.PHONY: cluster/down
cluster/down: ## Stop the cluster of cluster/up
	deploy/nats/cluster/cluster.sh stop

.PHONY: soak
soak: ## Fault soak (minutes): 1000 calls over 3 toolworkers, replicas and nats-server SIGKILLed (SOAK_CALLS, SOAK_KILL_EVERY)
	$(GO) test -tags soak -run '^TestSoak$$' -count=1 -v -timeout 20m ./cmd/toolworker/

.PHONY: chaos
chaos: ## Chaos (minutes): conversations of five kinds (one an MCP tool's: npm ci --prefix internal/mcptest/node) while serve replicas, toolworkers and the nats-server are SIGKILLed; SPEC §20's invariants printed (CHAOS_CONVERSATIONS, CHAOS_FAULTS, CHAOS_KILL_EVERY, CHAOS_SEED)
	$(GO) test -tags chaos -run '^TestChaos$$' -count=1 -v -timeout 15m ./cmd/agent/

.PHONY: lint
lint: ## go.mod tidy, gofmt, go vet and golangci-lint (pinned; .golangci.yaml: staticcheck, the import rules, gosec, ...)
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod is not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@deps=$$($(GO) list -deps ./cmd/toolworker | grep -E '/offload/pkg/(agent|agentspec|session|conversation|llm|natsjs/remote|natsjs/convstore|natsjs/facestore)(/|$$)'); \
	if [ -n "$$deps" ]; then echo "cmd/toolworker links agent-side packages (ARCHITECTURE.md, dependency rules):"; echo "$$deps"; exit 1; fi
	@deps=$$($(GO) list -deps $(FACES) | grep -E '^github.com/nats-io/|/offload/pkg/(natsjs|embedded)(/|$$)'); \
	if [ -n "$$deps" ]; then echo "the faces ($(FACES)) link NATS code (ARCHITECTURE.md, dependency rules):"; echo "$$deps"; exit 1; fi
	$(GO) run $(GOLANGCI) run ./...

# The faces of agent serve and what they share with its core: no NATS code
# among their dependencies (issue 36).
FACES := ./pkg/web ./pkg/service ./pkg/pending ./pkg/links ./pkg/agui ./pkg/mcpface ./pkg/a2aface

.PHONY: lint/demo
lint/demo: ## Show that make lint's import rules bite: a face importing nats.go, and a package importing the wiring, each fail it
	@set -e; demo=pkg/web/zz_lint_demo.go; wiring=internal/mutate/zz_lint_demo.go; trap 'rm -f $$demo $$wiring' EXIT; \
	printf 'package web\n\nimport _ "github.com/nats-io/nats.go"\n' > $$demo; \
	printf 'package main\n\nimport _ "github.com/offload-dev/offload/pkg/agentproc"\n' > $$wiring; \
	if out=$$($(GO) list -deps $(FACES) 2>&1 | grep -E '^github.com/nats-io/'); then echo "go list -deps of the faces names NATS (as it must, with the demo): $$(echo $$out | head -c 120)"; else echo "lint/demo: the faces' dependency check did not see nats.go"; exit 1; fi; \
	if $(GO) run $(GOLANGCI) run --enable-only depguard ./pkg/web/ ./internal/mutate/ > /tmp/offload-lint-demo.txt 2>&1; then cat /tmp/offload-lint-demo.txt; echo "lint/demo: depguard let the violations through"; exit 1; fi; \
	grep -E 'zz_lint_demo' /tmp/offload-lint-demo.txt; echo "lint/demo: make lint fails on both, as it must"

.PHONY: fmt
fmt: ## Group the imports as lint wants them (gci, through golangci-lint fmt)
	$(GO) run $(GOLANGCI) fmt ./...

# govulncheck needs the vulnerability database. Where VULNDB cannot be
# fetched (no network), the check is skipped with a message instead of
# failing; VULNDB=file:///path/to/a/copy points it at a local copy.
.PHONY: vuln
vuln: ## Known vulnerabilities in the code's call graph: govulncheck (pinned) against VULNDB; skipped, saying so, when that cannot be reached
	@out=$$(timeout 10m $(GO) run $(GOVULNCHECK) -db $(VULNDB) ./... 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ] && { [ $$rc -eq 124 ] || grep -q 'fetching vulnerabilities' <<<"$$out"; }; then \
	  echo "vuln: SKIPPED: the vulnerability database $(VULNDB) cannot be reached from here:"; \
	  grep 'fetching vulnerabilities' <<<"$$out" || echo "govulncheck did not finish within 10m"; \
	  echo "vuln: run make vuln where it can be reached, or with VULNDB=file:///path/to/a/copy"; \
	  exit 0; \
	fi; \
	echo "$$out"; exit $$rc

.PHONY: mutate
mutate: ## Mutation check of the deferred-tool code: every mutation in internal/mutate/mutations.yaml must fail a test
	$(GO) run ./internal/mutate $(MUTATE_FLAGS)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 20s)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

.PHONY: bench
bench: ## Run the benchmarks of SPEC §8 and print ratios against baselines measured in the same run (with the 1 M-call RSS run; BENCH_FLAGS=-long=0 skips it)
	$(GO) run ./cmd/offload-bench $(BENCH_FLAGS)

.PHONY: tools
tools: $(GOBIN)/nats ## Install the pinned nats CLI into .bin/

$(GOBIN)/nats:
	GOBIN=$(GOBIN) $(GO) install $(NATSCLI)

$(GOBIN)/nats-server:
	GOBIN=$(GOBIN) $(GO) install $(NATSSERVER)

.PHONY: clean
clean: ## Remove build outputs
	rm -rf bin .bin
