# kuik — make help lists every target.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
TOOLS_DIR := $(CURDIR)/hack/tools
BIN_DIR   := $(CURDIR)/bin
TOOL      := $(GO) tool -modfile=$(TOOLS_DIR)/go.mod
# Test packages run in parallel, each with its own control plane; 2 at a time fits 2 cores.
TEST_P    ?= 2
TEST_FLAGS ?=

.PHONY: help
help: ## List every target.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver, kube-controller-manager and kubectl into the cache (reused when there).
	@hack/controlplane.sh >/dev/null

.PHONY: node
node: ## Build containerd, its shim, ctr and the CNI plugins into the cache, and install runc and nft (apt) when missing.
	@hack/node.sh >/dev/null

.PHONY: build
build: ## Build the webhook, secret-syncer and keeper binaries into bin/.
	$(GO) build -trimpath -o $(BIN_DIR)/ ./cmd/...

.PHONY: images
images: ## Build the webhook, secret-syncer and keeper images (linux/amd64+arm64, OCI layout in _output/images); REGISTRY=host[:port]/path pushes them.
	$(GO) run ./hack/images -out _output/images -bin _output/bin $(if $(REGISTRY),-registry=$(REGISTRY)) $(if $(filter 1 true,$(REGISTRY_INSECURE)),-insecure) $(if $(TAG),-tag=$(TAG))
# make test builds the images first: internal/images's test then finds go's build cache warm for
# both platforms (cross-compiling from cold takes longer than go test's default timeout here).
test: images

.PHONY: generate
generate: ## Regenerate deepcopy code from the API types.
	$(TOOL) controller-gen object:headerFile=hack/boilerplate.go.txt paths=./pkg/...

.PHONY: manifests
manifests: ## Regenerate the CRDs (config/crd and the chart's crds/).
	$(TOOL) controller-gen crd:maxDescLen=400 paths=./pkg/... output:crd:artifacts:config=config/crd
	@if [ -d charts/kuik ]; then mkdir -p charts/kuik/crds && cp config/crd/*.yaml charts/kuik/crds/; fi
	@# The chart ships policies/ byte for byte (helm package keeps no symlink out of the chart).
	@rm -rf charts/kuik/files/policies && mkdir -p charts/kuik/files/policies && cp policies/*.yaml charts/kuik/files/policies/

.PHONY: chart-readme
chart-readme: ## Regenerate the values table of charts/kuik/README.md from the comments of values.yaml.
	$(GO) run ./hack/chart-readme charts/kuik

.PHONY: docs
docs: ## Regenerate docs/reference (CRDs, chart values, flags, metrics) from the code (hack/docgen).
	$(GO) run ./hack/docgen

VERIFY_PATHS := pkg config charts docs/reference

# The prerequisites run in order: docs after manifests, as api.md reads the chart's CRDs.
.PHONY: verify
verify: generate manifests chart-readme docs ## Regenerate everything and fail if the tree changed.
	@git diff --exit-code -- $(VERIFY_PATHS) || { echo "generated files are stale: run make generate manifests chart-readme docs and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- $(VERIFY_PATHS))" || { git status --porcelain -- $(VERIFY_PATHS); echo "untracked generated files" >&2; exit 1; }

.PHONY: vet
vet: ## go vet every package.
	$(GO) vet ./...

.PHONY: lint
lint: ## Run golangci-lint (pinned in hack/tools).
	$(TOOL) golangci-lint run ./...

.PHONY: test
test: controlplane node ## Unit and integration tests (real kube-apiserver, etcd, kube-controller-manager), and the node tests (kubelet, containerd).
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) test -p $(TEST_P) -count=1 $(TEST_FLAGS) ./...

.PHONY: test-unit
test-unit: ## Only the tests that need no control plane.
	$(GO) test -count=1 -short ./...

.PHONY: demo
demo: controlplane node ## Run kuik end to end on a local node (kubelet, containerd) with the chart and freshly built images, and leave it running to explore.
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) run ./hack/demo up

.PHONY: demo-down
demo-down: ## Stop the demo's node (its processes, namespaces, mounts, cgroups) and remove its state.
	$(GO) run ./hack/demo down

.PHONY: bench
bench: ## Micro-benchmarks (go test -bench); figures are printed, never asserted.
	$(GO) test -run='^$$' -bench=. -benchmem ./internal/...

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 20s), one after the other (hack/fuzz.sh).
	hack/fuzz.sh $${FUZZTIME:-20s}

.PHONY: campaign-smoke
campaign-smoke: controlplane node ## A short run of every fault, load and scale program of docs/CAMPAIGN.md (CI runs it; the figures of a smoke mean nothing).
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) run ./hack/faults -smoke all
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) run ./hack/badinput -smoke
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) run ./hack/bench/admission -pods 120 -rounds 3
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) run ./hack/bench/syncer -namespaces 50 -pods 500 -rewritten 50 \
		-latency-samples 10 -resync 10s -hostile-pods 10 -reannotate 5 -reannotate-names 500 \
		-peer-cmd 'hack/bench/syncer/peer-kubectl.sh 5' -peer-secret peer-pull -peer-quiet 5s
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) run ./hack/nodefaults -replicas 5 -observe 10s
	KUIK_ASSETS="$$(hack/controlplane.sh dir)" $(GO) run ./hack/bench/keeper -pods 500 -images 50 -namespaces 5 -self-heal-interval 5s -settle 3s
	hack/fuzz.sh 10s
