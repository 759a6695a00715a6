# chime — see README.md. `make run` runs the product; `make test` passes the tests.
GO        ?= go
BIN       := bin/chime
WASM      := chime.wasm
GOVERSION := $(shell $(GO) env GOVERSION)
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: all build wasm run test fuzz-seeds fuzz faults bench vet lint race clean

all: build wasm

# The filter: standard Go, wasip1 reactor (exports _initialize).
# scripts/goprogress.sh runs each build with -v and numbers the packages
# it compiles (nothing on a warm cache): the first build on a clean Go
# build cache compiles about 460 packages for bin/chime and 110 for
# chime.wasm.
wasm:
	@sh scripts/goprogress.sh -- GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $(WASM) ./plugin

build:
	@sh scripts/goprogress.sh -- $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/chime

# The demo stack on 127.0.0.1: proxy :10000 (admin :9901), mock provider :8788.
# The first build on a clean Go build cache takes minutes (README.md,
# "First run"); each package it compiles is shown as it goes. The two
# builds run side by side: the filter's fills the gaps the binary's leaves
# (its link, the chain of chime's own packages).
run:
	@$(MAKE) --no-print-directory -j2 build wasm
	./$(BIN) up -c envoy.yaml

vet:
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./plugin/... ./llm/...

# staticcheck (pinned, installed into bin/ through the module proxy) and a
# gofmt check, for the host build and for the wasm build of the filter.
STATICCHECK := bin/staticcheck
$(STATICCHECK):
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) ./...
	GOOS=wasip1 GOARCH=wasm $(STATICCHECK) ./plugin/... ./llm/... ./hostapi/...

# The race detector over the concurrent parts: host, proxy data plane,
# protocol layer and storage, and the wasm runtime's VM lifecycle (shared
# VMs, background workers, replacement after a fault, the interpreted
# start's switch). TestUnderWasm is skipped: the code it runs is wasm.
race:
	$(GO) test -race -count=1 -timeout 20m -skip TestUnderWasm ./host/... ./envoy/internal/proxy/... ./llm/... ./hostapi/... ./storage/...
	$(GO) test -race -count=1 -timeout 10m -run 'Interpret|SharedVM|Background|Reload|Closed' ./envoy/internal/wasmhost/

# The e2e tests `make test` runs a second time under the envoy-1.39 WASI
# profile (the whole suite runs under envoy-1.38): both backends of the
# proxy tests, the request and response paths through `chime up`, holds,
# timers, the route directive, and the check that the profile is in effect.
E2E_139 = ^(TestWASIProfileInEffect|TestJSONThroughFilter|TestSSEStreamsLive|TestHostDownFailsOpen|TestOversizedBodyGets413|TestRequestPathThroughChimeUp|TestStopMessage|TestHoldUntilDue|TestRouteDirectiveSameRequest|TestTimerTools)$$

# Unit, conformance, fuzz seed corpora (Fuzz* run their seeds as tests) and e2e.
test: vet wasm
	@[ -n "$$ENVOY_BIN" ] || echo "make test: ENVOY_BIN is not set, so the e2e runs against a real Envoy are skipped; the local runtime runs every e2e test."
	CHIME_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 -timeout 20m ./...
	CHIME_E2E_WASI_PROFILE=envoy-1.39 CHIME_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 -timeout 10m -run '$(E2E_139)' ./e2e/

# Every Fuzz target of every package for FUZZTIME each (their seed
# corpora run in `make test`); non-zero when any finds a failure. The
# minimizing step is bounded too: a stream-reader crash would otherwise
# spend the whole budget shrinking its input.
FUZZTIME         ?= 30s
FUZZMINIMIZETIME ?= 10s
fuzz:
	@fail=0; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg || fail=1; \
	  done; \
	done; exit $$fail

# The fault benchmark (issue 17): 1 000 schedules and 1 000 due deliveries
# through the proxy while a real `chime host` is killed with SIGKILL 20
# times and stopped once for 5 s; prints lost, duplicated outside the
# reserve→commit window, and due→delivered p99.
faults: wasm
	CHIME_WASM=$(CURDIR)/$(WASM) $(GO) test -run '^$$' -bench '^BenchmarkFaults$$' -benchtime 1x -timeout 20m ./e2e/

# Benchmarks that compare side by side in one run and print ratios:
# proxy with vs without the filter (real host; request path and SSE first
# byte), the 1 MB request edit
# natively vs in wasm vs a plain copy, the filter's callbacks for one quiet
# 1 KB request in the runtime (BenchmarkChimeFilter; again with the caches
# evicted before each request, as under load; and the guest code such a
# request runs, BenchmarkChimeFootprint), prepare over 10k sessions, 10 000
# cron jobs due within a second (lateness p50/p99, heap per job), the
# abuse benchmark (heap ratio over 5 000 requests of 2 000 directives) and,
# among the e2e ones, the overload benchmark (1 000 concurrent stopMessage
# clients: continuations run, failed open, p99) and BenchmarkUpReady
# (`chime up` to its first 200 with a cold and a warm wasm cache; set
# CHIME_UP_BASELINE to another chime binary for a side-by-side column).
# make bench BEFORE=<git revision> also measures that revision's filter,
# binary and 1 MB edit guest in the same rounds ("before" rows and
# columns: CHIME_WASM_BEFORE, CHIME_UP_BASELINE, BENCHWORK_GUEST_BEFORE).
BEFORE ?=
BEFORE_DIR ?= $(CURDIR)/bin/before
BEFORE_ENV = $(if $(BEFORE),CHIME_WASM_BEFORE=$(BEFORE_DIR)/chime.wasm CHIME_UP_BASELINE=$(BEFORE_DIR)/chime CHIME_UP_BASELINE_WASM=$(BEFORE_DIR)/chime.wasm BENCHWORK_GUEST_BEFORE=$(BEFORE_DIR)/benchwork-guest.wasm)

bench: wasm
	@if [ -n "$(BEFORE)" ]; then sh scripts/bench-before.sh "$(BEFORE)" "$(BEFORE_DIR)"; fi
	$(BEFORE_ENV) CHIME_WASM=$(CURDIR)/$(WASM) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./e2e/
	$(BEFORE_ENV) $(GO) test -run '^$$' -bench 'Edit1MB|Copy1MB' -benchmem ./internal/benchwork/
	$(BEFORE_ENV) CHIME_WASM=$(CURDIR)/$(WASM) $(GO) test -run '^$$' -bench ChimeFilter -benchtime 1x ./envoy/internal/wasmhost/
	$(BEFORE_ENV) CHIME_BENCH_EVICT=32 CHIME_WASM=$(CURDIR)/$(WASM) $(GO) test -v -run '^$$' -bench 'ChimeFilter/chat-1KB' -benchtime 1x ./envoy/internal/wasmhost/
	$(BEFORE_ENV) CHIME_WASM=$(CURDIR)/$(WASM) $(GO) test -run '^$$' -bench ChimeFootprint -benchtime 1x ./envoy/internal/wasmhost/
	$(GO) test -run '^$$' -bench Prepare10kSessions -benchtime 2000x ./host/
	$(GO) test -run '^$$' -bench AbuseDirectives -benchtime 5000x -timeout 30m ./host/
	$(GO) test -run '^$$' -bench PrepareConcurrentStopMessage -benchtime 3x ./host/
	$(GO) test -run '^$$' -bench Cron10k -benchtime 1x ./host/cron/

clean:
	rm -rf bin $(WASM)
