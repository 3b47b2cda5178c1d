# make test: what CI runs. It installs and starts what the tests need
# (idempotent), lints and vets, then runs every test with the race detector,
# the MySQL (the machine's MariaDB), PostgreSQL (the machine's cluster) and
# DynamoDB (DynamoDB Local) suites included.
GO ?= go
# staticcheck is pinned and run from the module cache, so that its own
# dependencies stay out of the project's go.mod.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOCYCLO ?= github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0
GOFMT = $(shell $(GO) env GOROOT)/bin/gofmt
DYNAMODB_PORT ?= 8000
export TEST_POSTINO_MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/
export TEST_POSTINO_POSTGRES_DSN ?= postgres://root@127.0.0.1:5432/test

.PHONY: test test-deps deps corpora corpora-if-missing lint vet build proto fuzz bench-accept bench-relay bench-stores bench-depth bench-suppress bench-bounces

# The tests run beside a DynamoDB Local of their own (.ci/with-dynamodb), so
# that two runs at once share none; TEST_POSTINO_DYNAMODB_ENDPOINT set in the
# environment names one to use instead.
# The sites test runs at the size of the fleet it stands for (10,000
# messages to 40 domains on 4 sites) once more without the race detector,
# under which that size takes minutes.
test: test-deps corpora-if-missing lint vet
	$(if $(TEST_POSTINO_DYNAMODB_ENDPOINT),,.ci/with-dynamodb) $(GO) test -race -count=1 -timeout 20m ./...
	TEST_POSTINO_SITES_MESSAGES=10000 $(GO) test -count=1 -run 'TestSites$$' ./relay/delivery/

test-deps:
	@.ci/deps

# corpora fetches the real mail the bounce and PEC tests read (third-party
# mail, kept out of the repository) into testdata/, at pinned commits,
# checked file by file (contrib/corpora). The tests read testdata/ first,
# then ../shared/corpora.
corpora:
	contrib/corpora/fetch testdata

# make test fetches the corpora when neither place has them and the network
# allows; when it does not, the tests that read them say so (and fail under
# CI=true).
corpora-if-missing:
	@for c in bounces-sisimai pec-real; do \
		[ -d testdata/$$c ] || [ -d ../shared/corpora/$$c ] || { contrib/corpora/fetch testdata || echo "corpora: not fetched; the tests that read them will skip (run make corpora)" >&2; break; }; \
	done

# deps also starts the shared DynamoDB Local on DYNAMODB_PORT, which the
# benchmarks and tests run by hand use.
deps:
	@TEST_POSTINO_DYNAMODB_PORT=$(DYNAMODB_PORT) .ci/deps

# lint: gofmt, staticcheck (its checks in staticcheck.conf), and no
# function outside the tests above cyclomatic complexity 20 (gocyclo): one a
# reader cannot hold in their head gets split. All run, so that one failure
# does not hide another.
lint:
	@rc=0; \
	unformatted=$$($(GOFMT) -l .); \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files are not formatted (gofmt -w FILE fixes them):" >&2; \
		echo "$$unformatted" >&2; rc=1; \
	fi; \
	$(GO) run $(STATICCHECK) ./... || rc=1; \
	complex=$$($(GO) run $(GOCYCLO) -over 20 -ignore '_test\.go$$' .); \
	if [ -n "$$complex" ]; then \
		echo "gocyclo: these functions are over 20; split them:" >&2; \
		echo "$$complex" >&2; rc=1; \
	fi; \
	exit $$rc

vet:
	$(GO) vet ./...

# fuzz runs every fuzz target of the module (each `func Fuzz...` of a
# _test.go file, found afresh each time) for FUZZTIME. go test -fuzz takes
# one target of one package at a time.
FUZZTIME ?= 20s
fuzz:
	@set -e; grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r dir; do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$dir"/*_test.go); do \
			echo "fuzz: $$dir $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) "$$dir"; \
		done; \
	done

build:
	$(GO) build -o bin/postino ./cmd/postino

# proto regenerates the plugin contract's Go code (committed) from
# plugins/proto/callback.proto: protoc from Debian's protobuf-compiler, the
# generators pinned here so that a regeneration changes nothing by itself.
PROTOC_GEN_GO ?= v1.36.12
PROTOC_GEN_GO_GRPC ?= v1.6.2
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin

proto:
	@command -v protoc >/dev/null || { echo "protoc is missing: apt-get install -y protobuf-compiler" >&2; exit 1; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC)
	PATH="$(GOBIN_DIR):$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative plugins/proto/callback.proto

# Speed and memory are measured by benchmarks, never by timed tests.
bench-accept:
	contrib/bench/load.sh

bench-relay:
	contrib/bench/load.sh -d

bench-stores: deps
	TEST_POSTINO_DYNAMODB_ENDPOINT=$${TEST_POSTINO_DYNAMODB_ENDPOINT:-http://127.0.0.1:$(DYNAMODB_PORT)} $(GO) test -run XXX -bench Store -benchtime 2000x ./backends/...

# bench-depth fills a fresh outbox with DEPTH_N messages (mostly deferred,
# some acknowledged, a suspended batch at the head), then measures the relay
# on it: start-up, a new message, claims, /v1/stats, the listings' pages.
# DEPTH_FLAGS passes more flags (go run ./contrib/bench/depth -h lists them).
DEPTH_STORE ?= bolt
DEPTH_N ?= $(if $(filter dynamodb,$(DEPTH_STORE)),100000,1000000)
DEPTH_FLAGS ?=

bench-depth:
	$(GO) run ./contrib/bench/depth -store $(DEPTH_STORE) -n $(DEPTH_N) $(DEPTH_FLAGS)

# bench-suppress imports SUPPRESS_N entries into the suppression list of a
# fresh outbox of SUPPRESS_STORE (bolt, mysql or postgres), as `postino
# suppression import` would, and times the lookup delivery and intake make
# per message on it (p50, p90, p99, max). load.sh -u N measures the relay on
# such a list (docs/benchmarks.md).
SUPPRESS_STORE ?= bolt
SUPPRESS_N ?= 1000000

bench-suppress:
	$(GO) run ./contrib/bench/suppress bench -backend $(SUPPRESS_STORE) -n $(SUPPRESS_N)

# bench-bounces scores the bounce parser against sisimai's corpus
# (testdata/bounces-sisimai or ../shared/corpora/bounces-sisimai): recipients, status codes, hard or
# soft (on the bounce rows but sisimai's filtered and suspend), and reasons agreeing with its
# expected.tsv; hard verdicts on a soft reason, and false recipients.
bench-bounces:
	$(GO) run ./contrib/bench/bouncescore
