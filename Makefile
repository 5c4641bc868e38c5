# ragtail — make targets. `make test` is what CI runs (see .ci/run).
GO       ?= go
PKGS     ?= ./...
BIN      ?= bin/ragtail
BENCHTIME ?= 1s

.PHONY: all build test test-timing test-deps fuzz-smoke e2e bench bench-observer bench-telemetry bench-telemetry-ab bench-loadgen lint fmt tidy deps demo clean jaeger

all: build

## build: compile the ragtail binary into bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o $(BIN) ./cmd/ragtail

## test: vet, then every unit and integration test with the race detector, but the timing tests
## (make test-timing runs those); tools/testsum prints the failures and, at the end, how many
## tests passed, failed and were skipped, with each skip's reason
TESTSUM = $(GO) run ./tools/testsum
test: test-deps
	$(GO) vet $(PKGS)
	$(TESTSUM) -- $(GO) test -race -count=1 -timeout 15m -skip '$(TIMING_TESTS)' -json $(PKGS)

## test-timing: the timing acceptance tests (shedding of the default serve at 10x capacity, the
## load generator's fidelity against servers whose latency is known), without the race detector,
## one package at a time (-p 1), so that what they time is the code and not the detector or
## the other tests; each test's figures are printed. Under CI=true a test that would skip (the
## machine too loaded to measure, twice) fails instead. A timing test added elsewhere goes
## into both lists.
TIMING_TESTS = ^(TestSheddingAtOverload|TestServeShedsAtTenTimesCapacity|TestParetoServiceTime|TestStallShowsFromIntendedSendOnly|TestFixedTTFTAndITLEndToEnd|TestSweepBisectsUsers|TestSweepFindsKneeAndMaxRPS|TestSweepConcurrencyLadder|TestCompareFailOnRegression|TestHoldSLOAgreesWithSweep)$$
TIMING_PKGS = ./rag/service/ ./cmd/ragtail/ ./loadgen/
test-timing:
	$(TESTSUM) -v -- $(GO) test -count=1 -p 1 -timeout 20m -run '$(TIMING_TESTS)' -json $(TIMING_PKGS)

## test-deps: what make test needs besides Go, from Debian: a C compiler for the race detector,
## and PostgreSQL and Redis, which the tests start on loopback (internal/testpeer)
test-deps:
	@missing=""; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	{ command -v pg_ctl >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	if [ -n "$$missing" ]; then \
		echo "make test needs:$$missing (gcc for the race detector; the tests start PostgreSQL and Redis themselves)."; \
		echo "Install them with: sudo apt-get install -y$$missing"; \
		exit 1; \
	fi

## e2e: end-to-end tests against the built binary: a real Prometheus (Debian package
## prometheus) scrapes a running `ragtail serve`; its query API must return the telemetry
## (with the other tests of cmd/ragtail, but its timing test, which make test-timing runs)
e2e: bin/jaeger
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || \
		{ echo "make e2e needs prometheus and promtool: apt-get install prometheus"; exit 1; }
	$(TESTSUM) -- $(GO) test -count=1 -timeout 20m -tags e2e -skip '$(TIMING_TESTS)' -json ./cmd/ragtail/

## bench: Go benchmarks of the hot paths (figures, not pass/fail); then what telemetry costs:
## the observer effect on the demo's latency (bench-observer) and the CPU and allocations a
## request costs the pipeline (bench-telemetry); then the load generator side by side with vegeta
## (built from its Go module in tools/vegeta): CPU per request at 10,000 req/s, top rate, send lag
## at 2,000 req/s, as ratios from one run
bench:
	$(GO) test -run '^$$' -bench . -skip 'PipelineTelemetry|ObserverEffect' -benchmem -benchtime $(BENCHTIME) $(PKGS)
	$(MAKE) bench-observer
	$(MAKE) bench-telemetry
	$(MAKE) bench-loadgen

## bench-observer: BenchmarkObserverEffect: the demo's world and load against the service with
## telemetry fully on and fully off, in alternating phases of one run (OBSERVER_PAIRS pairs of
## OBSERVER_PHASE each, about 3.5 minutes by default): TTFT and E2E at P50 and P95 of each, with
## their 95% intervals, the difference and whether the intervals overlap
OBSERVER_PAIRS ?= 4
OBSERVER_PHASE ?= 20s
bench-observer:
	$(GO) test -run '^$$' -bench ObserverEffect -benchtime 1x ./cmd/ragtail/ -args -observer.pairs $(OBSERVER_PAIRS) -observer.phase $(OBSERVER_PHASE)

## bench-telemetry: BenchmarkPipelineTelemetry TELCOUNT times, then per corpus the median, min and
## max of loss_% (process CPU per request, telemetry fully on against off, on backends that cost
## nothing), allocs/op and on_allocs/req, and the ablation (the loss of each telemetry component
## on its own) (tools/telsum.awk): figures, not targets. The tiny corpus runs ten times the
## requests, so that its phases last about as long as the default corpus's. TELREQS_DEFAULT and
## TELREQS_TINY set the requests of a run (30 rounds, so a phase runs a sixtieth of them: 200
## and 2,000); TELARMS the arms besides off (-telemetry.arms, e.g. all,aa).
TELCOUNT ?= 3
TELREQS_DEFAULT ?= 12000
TELREQS_TINY ?= 120000
TELARMS ?=
TELFLAGS = -run '^$$' -benchmem -count $(TELCOUNT)
TELARGS = $(if $(TELARMS),-args -telemetry.arms=$(TELARMS))
bench-telemetry:
	@mkdir -p bin
	$(GO) test $(TELFLAGS) -bench 'PipelineTelemetry/corpus=default' -benchtime $(TELREQS_DEFAULT)x ./telemetry/ $(TELARGS) > bin/bench-telemetry.txt || { cat bin/bench-telemetry.txt; exit 1; }
	$(GO) test $(TELFLAGS) -bench 'PipelineTelemetry/corpus=tiny' -benchtime $(TELREQS_TINY)x ./telemetry/ $(TELARGS) >> bin/bench-telemetry.txt || { cat bin/bench-telemetry.txt; exit 1; }
	@cat bin/bench-telemetry.txt
	awk -f tools/telsum.awk bin/bench-telemetry.txt

## bench-telemetry-ab: telemetry's cost at BASE (a commit, default HEAD) against the working
## tree's, side by side: both telemetry test binaries, PAIRS pairs of runs taking turns, the order
## reversed every other pair (ABBA), on AB_CORPUS (tiny or default) with the arms AB_ARMS, then
## tools/telab's figures, paired differences and sign test (verdict at p < 0.05) of AB_METRIC
## (default: loss_% when AB_ARMS has all, else the first arm's loss, e.g. loss_spans_%).
BASE ?= HEAD
PAIRS ?= 8
AB_CORPUS ?= tiny
AB_ARMS ?= all
AB_METRIC ?=
bench-telemetry-ab:
	@mkdir -p bin
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && git archive $(BASE) | tar -x -C "$$tmp" && \
		cd "$$tmp" && $(GO) test -c -o "$(CURDIR)/bin/telemetry-base.test" ./telemetry/
	$(GO) test -c -o bin/telemetry-head.test ./telemetry/
	$(GO) run ./tools/telab -a bin/telemetry-base.test -b bin/telemetry-head.test -pairs $(PAIRS) -corpus $(AB_CORPUS) -arms $(AB_ARMS) $(if $(AB_METRIC),-metric '$(AB_METRIC)')

## bench-loadgen: ragtail bench against vegeta v12.13.0 on one trivial loopback endpoint
bench-loadgen: build
	cd tools/vegeta && $(GO) build -o ../../bin/vegeta github.com/tsenart/vegeta/v12 && $(GO) build -o ../../bin/sidebyside ./sidebyside
	bin/sidebyside --ragtail $(BIN) --vegeta bin/vegeta

## lint: gofmt, go vet, and golangci-lint (pinned in tools/golangci-lint, built into bin/) with the
## depguard rules of the dependency direction (.golangci.yml)
GOLANGCI_LINT ?= bin/golangci-lint
$(GOLANGCI_LINT): tools/golangci-lint/go.mod tools/golangci-lint/go.sum
	cd tools/golangci-lint && $(GO) build -o ../../$(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

lint: $(GOLANGCI_LINT)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GOLANGCI_LINT) run ./...

## fuzz-smoke: the fuzz targets of what parses or writes outside input on the wire (the h1
## transport's requests and responses, the SSE reader, the redaction of secrets, the chat request)
## for FUZZSMOKE each: CI runs it to find what the seed corpora miss, briefly
FUZZSMOKE ?= 10s
FUZZ_SMOKE_TARGETS = ./loadgen/client/internal/h1:FuzzWriteRequest ./loadgen/client/internal/h1:FuzzReadResponse \
	./loadgen/client:FuzzSSEReader ./internal/redact:FuzzRedact ./rag/openai:FuzzDecodeChatRequest
fuzz-smoke:
	@set -e; for t in $(FUZZ_SMOKE_TARGETS); do \
		pkg=$${t%%:*}; f=$${t##*:}; echo "== $$pkg $$f ($(FUZZSMOKE))"; \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZSMOKE) $$pkg; \
	done

## fuzz: run every fuzz target for FUZZTIME each (not in CI: a long run looks for new inputs;
## the seed corpora run in every `make test`)
FUZZTIME ?= 30s
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

## fmt: format all Go files
fmt:
	gofmt -w $$(git ls-files '*.go')

## tidy: go mod tidy, failing if it changes go.mod or go.sum
tidy:
	$(GO) mod tidy
	git diff --exit-code go.mod go.sum

## deps: download the Go modules
deps:
	$(GO) mod download

## demo: run the service and a short load in each coupling mode
demo:
	$(GO) run ./cmd/ragtail demo

## jaeger: build the Jaeger v2 all-in-one (in-memory storage, OTLP on 4317/4318, query on
## 16686) into bin/jaeger from its Go module, pinned in tools/jaeger/go.mod so that its many
## dependencies stay out of ragtail's go.mod (about 2.5 minutes and 2.4 GB of build cache)
## (make e2e builds it when missing or older than tools/jaeger/go.sum; JaegerE2E runs it).
jaeger: bin/jaeger

bin/jaeger: tools/jaeger/go.mod tools/jaeger/go.sum
	cd tools/jaeger && CGO_ENABLED=0 $(GO) build -trimpath -o ../../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger

clean:
	rm -rf bin
