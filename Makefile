# leasegate's build. `make help` lists the targets.
include hack/versions.env

SHELL := /usr/bin/env bash -o pipefail
BIN := $(CURDIR)/bin
GO ?= go
export CGO_ENABLED ?= 0
GO_BUILD := $(GO) build -trimpath -ldflags "-s -w"

# The control plane envtest starts. KUBEBUILDER_ASSETS set by you wins and is never rebuilt.
CONTROLPLANE_DIR := $(BIN)/controlplane/$(KUBERNETES_VERSION)-$(ETCD_VERSION)
ifeq ($(origin KUBEBUILDER_ASSETS),environment)
CONTROLPLANE_DEP :=
else
CONTROLPLANE_DEP := $(CONTROLPLANE_DIR)/kube-apiserver
export KUBEBUILDER_ASSETS := $(CONTROLPLANE_DIR)
endif

STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)
TOOLS_DIR := $(BIN)/tools
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)
VERSION ?= $(shell sed -n 's/^appVersion: //p' charts/leasegate/Chart.yaml)
IMAGE_REGISTRY ?= ghcr.io/leasegate

.PHONY: help
help: ## List the targets.
	@awk -F':.*## ' '/^[a-z0-9-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build leasegate-agent and leasegate-webhook into bin/.
	$(GO_BUILD) -o $(BIN)/leasegate-agent ./cmd/agent
	$(GO_BUILD) -o $(BIN)/leasegate-webhook ./cmd/webhook

.PHONY: controlplane
controlplane: $(CONTROLPLANE_DEP) ## Build kube-apiserver and etcd from the Go module proxy into bin/ (cached).

.PHONY: cluster-binaries
cluster-binaries: ## Also build kube-controller-manager, kube-scheduler, kubelet and kube-proxy (for the real-cluster suite).
	BIN_DIR=$(BIN) COMPONENTS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy" hack/build-controlplane.sh >/dev/null

$(CONTROLPLANE_DIR)/kube-apiserver: hack/versions.env hack/build-controlplane.sh
	BIN_DIR=$(BIN) hack/build-controlplane.sh >/dev/null
	@touch $@

.PHONY: tools
tools: $(HELM) ## Build helm and cert-manager (controller, cainjector, CRDs) from the Go module proxy into bin/tools (cached).

$(HELM): hack/versions.env hack/build-tools.sh
	BIN_DIR=$(BIN) hack/build-tools.sh >/dev/null
	@touch $@

.PHONY: images
images: ## Build the leasegate-webhook and leasegate-agent images (needs a Docker engine), tagged with the chart's appVersion.
	docker build -f Dockerfile.webhook --build-arg VERSION=$(VERSION) -t $(IMAGE_REGISTRY)/leasegate-webhook:$(VERSION) .
	docker build -f Dockerfile.agent --build-arg VERSION=$(VERSION) -t $(IMAGE_REGISTRY)/leasegate-agent:$(VERSION) .

.PHONY: test
test: $(CONTROLPLANE_DEP) $(HELM) ## Unit, integration and e2e tests against a real kube-apiserver and etcd (CI runs it, then e2e-cluster).
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m ./...

# As root, `make e2e` runs the real-cluster specs too.
ROOT := $(filter 0,$(shell id -u))

.PHONY: e2e
e2e: $(CONTROLPLANE_DEP) $(HELM) $(if $(ROOT),cluster-prerequisites) ## The whole Ginkgo e2e suite, verbose (as root with the real-cluster specs).
	$(GO) test -v -count=1 -timeout 40m ./test/e2e/ -ginkgo.v $(if $(ROOT),-cluster)

# The real-cluster specs run as root: they make a bridge, iptables chains, cgroups and mounts, and remove
# them. The Debian packages they need are installed when missing.
CLUSTER_SUITE := $(GO) test -v -count=1 -timeout 40m ./test/e2e/ -cluster -ginkgo.label-filter=cluster

.PHONY: cluster-prerequisites
cluster-prerequisites: cluster-binaries $(HELM)
	@missing=""; for p in containerd runc iptables conntrack; do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	  [ -x /usr/lib/cni/bridge ] || missing="$$missing containernetworking-plugins"; \
	  if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

.PHONY: e2e-cluster
e2e-cluster: cluster-prerequisites ## As root: start a real single-node cluster, helm install leasegate, run the chaos specs, tear it all down.
	$(CLUSTER_SUITE) -ginkgo.v

.PHONY: bench
bench: $(CONTROLPLANE_DEP) cluster-prerequisites ## Go benchmarks of the hot paths, the failover table, the fence under load, and (root) the real-cluster table.
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...
	$(GO) run ./test/failoverbench -runs 20
	$(GO) run ./test/fenceload -rate 1000 -duration 10s
	$(CLUSTER_SUITE) -cluster.runs 20 -cluster.report $(BIN)/cluster-bench.md
	@cat $(BIN)/cluster-bench.md

.PHONY: demo
demo: $(CONTROLPLANE_DEP) ## The webhook injects agents into a labelled namespace's pods; they elect a leader and fail over.
	$(GO) run ./test/demo $(ARGS)

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet and staticcheck.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [[ -n $$unformatted ]]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(BIN)/.staticcheck $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN)/.staticcheck/staticcheck $@

.PHONY: clean
clean: ## Remove bin/, except the cached control plane.
	find $(BIN) -mindepth 1 -maxdepth 1 ! -name controlplane -exec rm -rf {} +
