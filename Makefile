# make test: what CI runs. It installs and starts what the tests need
# (idempotent), then vets and runs every test with the race detector, the
# MySQL (the machine's MariaDB) and DynamoDB (DynamoDB Local) suites included.
GO ?= go
DYNAMODB_PORT ?= 8000
export TEST_POSTINO_DYNAMODB_ENDPOINT ?= http://127.0.0.1:$(DYNAMODB_PORT)
export TEST_POSTINO_MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/

.PHONY: test deps vet build proto bench-accept bench-relay bench-stores

test: deps vet
	$(GO) test -race -count=1 -timeout 14m ./...

deps:
	@TEST_POSTINO_DYNAMODB_PORT=$(DYNAMODB_PORT) .ci/deps

vet:
	$(GO) vet ./...

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
	$(GO) test -run XXX -bench Store -benchtime 2000x ./backends/...
