# swarmkv — see README.md. `make run` starts a one-node cluster, `make test`
# runs the test suite (what .ci/run runs).

GO        ?= go
BIN       := bin/swarmnode
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
# Packages whose code runs goroutines get the race detector in `make test`.
# Every package is in one of the two lists (make vet checks).
RACE_PKGS := ./fsm/... ./cluster/... ./api/... ./transport/... ./server/... ./admin/... ./console/... ./redisfront/... ./etcdfront/... ./client/... ./internal/... ./raftlog/...
PURE_PKGS := ./backup/... ./keys/... ./resp/... ./shard/... ./records/... ./secrets/... ./auth/... ./rpc/... ./cmd/... ./e2e/... ./deploy/... ./examples/... ./jepsen/... ./scripts/...
FUZZTIME  ?= 10s
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

.PHONY: all build run test test-short test-ui chromium vet fuzz proto cluster-local clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/swarmnode

# One node, embedded defaults: data under ./data, gRPC on 127.0.0.1:7100,
# HTTP (/healthz, /readyz, the console at /ui/) on 127.0.0.1:7102; once
# ready it prints what to try next (docs/getting-started.md).
run: build
	./$(BIN)

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@missing=$$($(GO) list ./... | sed 's|^github.com/swarmkv/swarmkv|.|' | while read p; do \
	  top=$$(echo $$p | cut -d/ -f2); echo " $(RACE_PKGS) $(PURE_PKGS) " | grep -q " ./$$top/\.\.\. " || echo $$p; done); \
	  test -z "$$missing" || { echo "packages in neither RACE_PKGS nor PURE_PKGS: $$missing"; exit 1; }
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$$1 > 1048576 {print $$2 " (" $$1 " bytes)"}'); \
	  test -z "$$big" || { echo "tracked files over 1 MiB (binaries, data: keep them out of git): $$big"; exit 1; }

test: vet chromium
	$(GO) test -count=1 $(PURE_PKGS)
	$(GO) test -count=1 -race -timeout 15m $(RACE_PKGS)

# The console's browser test (e2e/console, in PURE_PKGS: `make test` runs
# it) drives headless Chromium. `chromium` installs Debian's package when
# no Chromium is on the machine and apt-get can (as root); quiet when one
# is. Without one the test skips, except under CI=true, where it fails.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the console's browser test (e2e/console)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "no Chromium and no way to install it here (needs root and apt-get): the console's browser test will skip (CI=true fails it)"; \
	  fi

# Only the console's browser test, Chromium installed first; it fails
# rather than skips without one. UI_SCREENSHOT_DIR=dir saves screenshots.
test-ui: chromium
	SWARMKV_REQUIRE_BROWSER=1 $(GO) test -count=1 -v -run TestConsole ./e2e/console/

# Quick loop for development: no race detector, short mode.
test-short:
	$(GO) test -count=1 -short ./...

# Runs every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# Regenerates rpc/*.pb.go from rpc/*.proto (protoc from Debian's
# protobuf-compiler, plugins from the Go module proxy).
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(CURDIR)/bin:$$PATH protoc -I rpc \
	  --go_out=rpc --go_opt=paths=source_relative \
	  --go-grpc_out=rpc --go-grpc_opt=paths=source_relative rpc/*.proto

clean:
	rm -rf bin data

# --- Docker compose cluster (docker-compose.cluster.yml) and Jepsen-style tests.
# The image is FROM scratch around the static binary of `make build`.
# Node i publishes gRPC on 127.0.0.1:i<D>100 and HTTP on 127.0.0.1:i<D>102
# with D = SWARMKV_PORT_DIGIT (default 7: 17100/17102, 27100/27102, ...).
COMPOSE      ?= docker-compose -f docker-compose.cluster.yml -p swarmkv
IMAGE        ?= swarmkv:dev
export SWARMKV_PORT_DIGIT ?= 7
CLUSTER_HTTP := 127.0.0.1:1$(SWARMKV_PORT_DIGIT)102,127.0.0.1:2$(SWARMKV_PORT_DIGIT)102,127.0.0.1:3$(SWARMKV_PORT_DIGIT)102
JEPSEN_FLAGS ?= --duration 10m --nemesis all

.PHONY: image cluster-up cluster-down cluster-status jepsen

image: build
	docker build -t $(IMAGE) .

# Starts n1..n3 and waits until every node is ready (every shard has a leader).
cluster-up: image
	$(COMPOSE) up -d
	./$(BIN) health --ready --wait 90s --http-addr $(CLUSTER_HTTP)

# Removes containers, the network and the data volumes (spares too).
cluster-down:
	$(COMPOSE) --profile spare down -v --remove-orphans

cluster-status:
	@test -x $(BIN) || $(MAKE) build
	@$(COMPOSE) --profile spare ps
	@./$(BIN) health --ready --http-addr $(CLUSTER_HTTP)$$(for i in 4 5; do \
	  docker inspect -f '{{.State.Running}}' swarmkv-n$$i 2>/dev/null | grep -q true && printf ',127.0.0.1:%s%s102' $$i $(SWARMKV_PORT_DIGIT); done)

# Jepsen-style run against a fresh compose cluster (the membership nemeses
# leave other members than n1..n3 behind, so it starts with cluster-down);
# JEPSEN_FLAGS sets the schedule, e.g. JEPSEN_FLAGS='--duration 2m --nemesis kill,pause'.
# The report lands in jepsen-report/<time>/; exits non-zero on any anomaly.
jepsen: image
	$(MAKE) --no-print-directory cluster-down cluster-up
	$(GO) run ./jepsen/cmd/jepsen --driver docker --port-digit $(SWARMKV_PORT_DIGIT) --compose "$(COMPOSE) --profile spare" $(JEPSEN_FLAGS)
