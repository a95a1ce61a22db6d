# volhost build entry points. `make test` is what CI runs (see .ci/run).
GO            ?= go
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# One on-disk wazero compilation cache shared by every test package and run,
# keyed by wazero version, outside the tracked tree: compiling a 3 MB Go guest
# takes about 19 s under -race, loading it from this cache about 0.4 s.
WAZERO_VERSION := $(shell $(GO) list -m -f '{{.Version}}' github.com/tetratelabs/wazero 2>/dev/null)
export VOLHOST_WAZERO_CACHE ?= $(HOME)/.cache/volhost/wazero-$(WAZERO_VERSION)
PLUGIN_BUILD  := examples/plugins/build
# The deliberately faulty modules (plugins/pluginstest/modules), built apart
# so that `make run` loads only working ones.
TEST_MODULE_BUILD := bin/test-modules
TEST_TIMEOUT  ?= 20m

.PHONY: build plugins test-modules test test-short lint run bench bench-quick e2e chaos clean nomad

build:
	$(GO) build -o bin/volhost ./cmd/volhost

# Build every example module (GOOS=wasip1 c-shared Go guests) with its manifest.
plugins:
	@bash scripts/build-plugins.sh $(PLUGIN_BUILD)

test-modules:
	@bash scripts/build-plugins.sh $(TEST_MODULE_BUILD) plugins/pluginstest/modules

# -tags volhostcheck turns on the store's self-checks in every package's tests
# (host/state/own_rows_check.go); a production build has none of them.
test: plugins
	$(GO) test -race -tags volhostcheck -timeout $(TEST_TIMEOUT) ./...
	# test/extism is its own module: the same-decisions check against Extism and
	# TestGuestSteadyStateWork (no allocation per guest call).
	cd test/extism && $(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	# The radix tree volhost's store runs on is a fork in its own module
	# (third_party/go-immutable-radix): upstream's tests and the fork's.
	cd third_party/go-immutable-radix && $(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	# The guest's work per call, counted: these count through
	# uncached compiles, which -race makes too slow, so they run here without it.
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^TestGuestCall(Counts|Work)$$' ./plugins/
	# The store's allocation counts (a trim that must not walk the events
	# table, a save that must not copy what it writes) skip under -race,
	# whose instrumentation allocates: they run here without it.
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^(TestEventTrimDoesNotWalkTheTable|TestPersistAllocatesLessThanItWrites)$$' ./host/state/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	# The radix fork is a module of its own: ./... above does not reach it.
	cd third_party/go-immutable-radix && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	# The codecs are generated from abi/volhost.proto (abi/internal/gen):
	# regenerating must change nothing under abi/ (this also fails on
	# uncommitted edits there: commit first).
	$(GO) generate ./abi/...
	@git diff --exit-code --stat -- abi/ || { echo "go generate ./abi/... changed abi/ (or abi/ has uncommitted changes): regenerate and commit"; exit 1; }
	# User documents and the source (comments, test names, log lines) cite no
	# tracker numbers, sessions or private notes.
	@bash scripts/check-doc-refs.sh

# End-to-end: the real volhost binary against real CSI drivers (test/peers, a
# separate module: the GCE PD driver with its fake cloud, the csi-test mock).
# The first build of the GCE PD driver takes minutes; later runs reuse the
# Go build cache.
E2E_BIN := $(CURDIR)/bin/e2e
# The real Nomad the Nomad bridge's scenarios (TestNomad*) run against,
# built from the Go module proxy's source into a cache outside the
# repository (Nomad is BUSL-1.1: never committed): about 10 minutes of CPU
# on 2 cores the first time, skipped once built.
NOMAD_VERSION ?= v1.11.3
export VOLHOST_E2E_NOMAD ?= $(HOME)/.cache/volhost/nomad-$(NOMAD_VERSION)/nomad
nomad:
	@NOMAD_VERSION=$(NOMAD_VERSION) bash scripts/build-nomad.sh >/dev/null

e2e: plugins test-modules nomad
	$(GO) build -o $(E2E_BIN)/volhost ./cmd/volhost
	cd test/peers && $(GO) build -o $(E2E_BIN)/ ./cmd/gcepd ./cmd/mockcsi
	cd test/peers && $(GO) vet ./...
	cd test/peers && $(GO) test -race -count=1 ./internal/... ./cmd/mockcsi ./cmd/releasebench
	# The web UI's browser tests (TestUI*) drive Debian's chromium
	# (/usr/bin/chromium, or VOLHOST_E2E_CHROMIUM) and save a screenshot of
	# every page under bin/ui/.
	cd test/peers && VOLHOST_E2E_BIN_DIR=$(E2E_BIN) VOLHOST_E2E_PLUGIN_BUILD=$(CURDIR)/$(PLUGIN_BUILD) \
		VOLHOST_E2E_TEST_MODULES=$(CURDIR)/$(TEST_MODULE_BUILD) VOLHOST_E2E_UI_SHOTS=$(CURDIR)/bin/ui \
		$(GO) test -count=1 -timeout 30m ./e2e/...
	# The secured cluster with the real binary: 3 servers with ACL and
	# mutual TLS, a CLI release with a client token, a node token refused
	# force-deregister, a foreign-CA server refused at join, SIGHUP rotation.
	$(GO) test -count=1 -timeout 10m -run 'TestSecureBinaryCluster' ./cmd/volhost

# Claim safety under random interleavings: the model-based test over
# many more seeds than make test runs, then the chaos end-to-end run.
CHAOS_SEEDS    ?= 5000
CHAOS_RELEASES ?= 1000
CHAOS_KILLS    ?= 3
CHAOS_PAUSES   ?= 3
chaos: plugins
	VOLHOST_MODEL_SEEDS=$(CHAOS_SEEDS) $(GO) test -race -count=1 -timeout 60m -run TestClaimModel -v ./host/server/ | grep -v '^=== RUN'
	$(GO) build -o $(E2E_BIN)/volhost ./cmd/volhost
	cd test/peers && $(GO) build -o $(E2E_BIN)/ ./cmd/gcepd ./cmd/mockcsi
	cd test/peers && VOLHOST_E2E_BIN_DIR=$(E2E_BIN) VOLHOST_E2E_PLUGIN_BUILD=$(CURDIR)/$(PLUGIN_BUILD) \
		VOLHOST_CHAOS_RELEASES=$(CHAOS_RELEASES) VOLHOST_CHAOS_KILLS=$(CHAOS_KILLS) VOLHOST_CHAOS_PAUSES=$(CHAOS_PAUSES) \
		VOLHOST_CHAOS_REPORT=$(CURDIR)/bin/chaos-report.json \
		$(GO) test -count=1 -timeout 40m -run TestChaosFailover -v ./e2e/ | grep -E 'chaos report|^\s|---|^ok|FAIL|round'

# Benchmarks of every package and the end-to-end release benchmarks; writes
# BENCHMARKS.md and BENCHMARKS-release.png (scripts/bench.sh).
bench: build plugins
	@bash scripts/bench.sh

# The headline ratios for a reviewer on a fresh clone, in under 3 minutes:
# the module call (native, Go and AS guests, Extism, cold
# caches), 5 interleaved rounds, medians with min and max, the state
# store at 100,000 volumes built by bulk FSM apply, and the whole-host
# release CPU per claim (3 batches of 1,000 claims, median [min-max]).
# Writes bin/bench/quick-*.md.
bench-quick: plugins
	@mkdir -p bin/bench
	cd test/extism && VOLHOST_ROUNDS=5 VOLHOST_ROUND_CALLS=1000 VOLHOST_RATIOS_OUT=$(CURDIR)/bin/bench/quick-call.md \
		$(GO) test -run '^$$' -bench '^BenchmarkCallRatios$$' -benchtime 1x -timeout 10m . >/dev/null
	VOLHOST_SCALE_VOLUMES=100000 VOLHOST_SCALE_OUT=$(CURDIR)/bin/bench/quick-scale.md \
		$(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 10m ./host/state/ >/dev/null
	$(GO) test -run '^$$' -bench '^BenchmarkAgentReleaseNative$$' -benchtime 3x -timeout 10m ./host/agent/ \
		| awk -f scripts/release-table.awk >bin/bench/quick-release.md
	@cat bin/bench/quick-call.md; echo; cat bin/bench/quick-scale.md; echo; cat bin/bench/quick-release.md

# The Go example modules first, then the agent (listening at once, loading
# its modules after), the AssemblyScript ones behind it (scripts/run-dev.sh).
# RUN_ARGS go to the agent (make run RUN_ARGS="-http-addr 127.0.0.1:4848").
RUN_ARGS ?=
run: build
	@bash scripts/run-dev.sh $(PLUGIN_BUILD) $(RUN_ARGS)

clean:
	rm -rf bin $(PLUGIN_BUILD)
