# shardcache — make run starts a dev cluster, make test runs every test.
# Everything else these targets need (buf, the protoc plugins) is built from
# the Go module proxy at pinned versions into .bin/.

SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := $(CURDIR)/.bin
BUF := $(BIN)/buf
# Tests that start processes share 2 cores: keep the package parallelism low.
TEST_FLAGS ?= -p 2 -count=1 -timeout 15m
ARGS ?=
SCALE ?= 1000

.PHONY: help run build test test-deps unit e2e fuzz soak scale bench bench-go bench-quick proto verify-proto lint tidy-check clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

run: build ## start the dev cluster (embedded etcd, control plane, 3 nodes, demo origin); ARGS="--origin URL" etc.
	exec $(BIN)/shardcache dev $(ARGS)

# The version every binary reports: git describe, or "(devel)" outside a
# git checkout (then the binaries fall back to Go's build information).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := -X github.com/shardcache/shardcache/sdk/buildinfo.version=$(VERSION)

build: ## build shardcache and cachectl into .bin/, stamped with git describe
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/shardcache ./cmd/shardcache
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/cachectl ./cmd/cachectl

test: verify-proto lint tidy-check test-deps ## every check and every test, e2e included
	$(GO) test $(TEST_FLAGS) work

test-deps: ## install what the e2e tests need (Debian's etcd-server, prometheus, docker-registry, skopeo, containerd, tmux) when missing
	e2e/install-deps.sh

unit: ## the tests of every module but e2e
	$(GO) test $(TEST_FLAGS) $$($(GO) list -m -f '{{.Path}}/...' | grep -v /e2e/)

e2e: test-deps ## the end-to-end tests (real processes)
	$(GO) test $(TEST_FLAGS) -v ./e2e/...

bench: build bench-go ## compare with nginx and Varnish on this machine; writes bench/results/<date>.md and .png
	bench/install-deps.sh
	$(GO) run ./bench -shardcache $(BIN)/shardcache -cachectl $(BIN)/cachectl

bench-go: ## the Go benchmarks: store tiers, fills, index rebuild, ring, purge bans, local-only estimate (5 runs each; quote medians)
	$(GO) test -run '^$$' -bench . -count 5 ./dataplane/store/ ./dataplane/purge/ ./sdk/ring/ ./dataplane/metrics/

SOAK ?= 10m
SCALE_ARGS ?=
scale: build ## the control plane with SCALE (default 1000) simulated node sessions: epochs, purges one at a time and 1,000 a second, restart, etcd writes, memory; SCALE_ARGS="-join-rate 250 ..."; writes bench/results/scale-<date>-<SCALE>.md and ends with a "scale:" line
	$(GO) run ./cmd/scalesim -nodes $(SCALE) -shardcache $(BIN)/shardcache -out bench/results/scale-$$(date -u +%F)-$(SCALE).md $(SCALE_ARGS)

soak: build ## a cluster under full load for SOAK (default 10m): throughput, p99, memory, descriptors and goroutines charted in bench/results/soak-<date>
	$(GO) run ./bench -soak $(SOAK) -shardcache $(BIN)/shardcache -cachectl $(BIN)/cachectl

FUZZTIME ?= 1m
fuzz: ## run each fuzz test for FUZZTIME (default 1m); make test runs their seed corpora
	$(GO) test -run '^$$' -fuzz '^FuzzParseRange$$' -fuzztime $(FUZZTIME) ./dataplane/httpcache/
	$(GO) test -run '^$$' -fuzz '^FuzzCacheKey$$' -fuzztime $(FUZZTIME) ./sdk/policy/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCacheControl$$' -fuzztime $(FUZZTIME) ./dataplane/httpcache/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDate$$' -fuzztime $(FUZZTIME) ./dataplane/httpcache/
	$(GO) test -run '^$$' -fuzz '^FuzzParseTargeted$$' -fuzztime $(FUZZTIME) ./dataplane/httpcache/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMeta$$' -fuzztime $(FUZZTIME) ./dataplane/store/
	$(GO) test -run '^$$' -fuzz '^FuzzParsePrefix$$' -fuzztime $(FUZZTIME) ./dataplane/store/
	$(GO) test -run '^$$' -fuzz '^FuzzArrivalSendsWhatItKeys$$' -fuzztime $(FUZZTIME) ./dataplane/front/

bench-quick: build ## the same with short workloads, to try the harness (figures not for quoting)
	bench/install-deps.sh
	$(GO) run ./bench -quick -out $(CURDIR)/tmp/bench -shardcache $(BIN)/shardcache -cachectl $(BIN)/cachectl

$(BUF): tools/go.mod tools/go.sum
	GOWORK=off $(GO) build -C tools -o $(BUF) github.com/bufbuild/buf/cmd/buf

proto: $(BUF) ## regenerate the protobuf and gRPC code from proto/
	rm -f proto/shardcache/v1/*.pb.go
	$(BUF) format -w
	$(BUF) generate

verify-proto: proto ## fail if the committed generated code is stale
	@if [ -n "$$(git status --porcelain -- proto)" ]; then \
		echo "generated code in proto/ is stale or formatting changed: run make proto and commit"; \
		git status --porcelain -- proto; exit 1; fi

lint: $(BUF) ## buf lint, buf format, gofmt and go vet
	$(BUF) lint
	$(BUF) format -d --exit-code
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet work

tidy-check: ## fail if a go.mod or go.sum is not tidy
	@for d in $$($(GO) list -m -f '{{.Dir}}'); do (cd $$d && GOWORK=off $(GO) mod tidy -diff) || { echo "go.mod in $$d is not tidy: run go mod tidy there"; exit 1; }; done

clean: ## remove built binaries and tools
	rm -rf $(BIN)
