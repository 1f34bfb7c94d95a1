# nodelet — stable entry points: build, runtime-up/down, controlplane-up/down, test, bench, demo.
SHELL := /bin/bash
GO ?= go
BIN := bin/nodelet
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
LDFLAGS := -s -w -X github.com/nodelet/nodelet/pkg/version.Nodelet=$(VERSION)
CACHE_DIR ?= /var/cache/nodelet
STATICCHECK_VERSION ?= v0.8.2
export PATH := $(CACHE_DIR)/bin:$(PATH)

.PHONY: build test test-unit test-e2e lint runtime-up runtime-down runtime2-up runtime2-down controlplane-up controlplane-down bench demo demo-cluster clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/nodelet

# The README's test command: lint, unit tests, then e2e tests against a real containerd
# (Debian's 1.6, then 2.x for events and user namespaces) and a real control plane that
# this target brings up itself (hack/test-e2e.sh).
test: lint test-unit test-e2e

test-unit:
	$(GO) test -count=1 ./pkg/... ./cmd/... ./hack/layers/ ./test/internal/... ./test/bench/...

# The control plane's line is taken as a whole (not grepped), so a failed `up` stops here.
test-e2e: build
	@hack/test-e2e.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...
	$(GO) run ./hack/layers
	hack/staticcheck.sh ./...

runtime-up:
	@hack/runtime.sh up

runtime-down:
	@hack/runtime.sh down

# The second flavour: containerd 2.x and runc built from the Go module proxy (cached;
# docs/runtimes.md), on its own socket, state and bridge.
runtime2-up:
	@NODELET_RUNTIME=containerd2 hack/runtime.sh up

runtime2-down:
	@NODELET_RUNTIME=containerd2 hack/runtime.sh down

# A real etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1
# (docs/controlplane.md); prints KUBECONFIG=... The first run builds them (cached).
# metrics-server comes with it, for `kubectl top`.
controlplane-up:
	@hack/controlplane.sh up && hack/metrics-server.sh up >/dev/null

controlplane-down:
	@hack/metrics-server.sh down; hack/controlplane.sh down

bench: build
	@eval "$$(hack/runtime.sh up | grep '^CONTAINER_RUNTIME_ENDPOINT=')" && \
	  export CONTAINER_RUNTIME_ENDPOINT && hack/bench.sh
	@hack/bench-cluster.sh
	@BENCH_RUNTIME=containerd2 BENCH_SCENARIOS=density hack/bench-cluster.sh
	@hack/bench-node.sh
	@hack/bench-scale.sh

demo: build
	@hack/demo.sh

# The same node joined to the project's control plane, with a Deployment scheduled to it.
demo-cluster: build
	@hack/demo.sh --cluster

clean:
	rm -rf bin
