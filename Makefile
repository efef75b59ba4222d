# leasegate's build. `make help` lists the targets.
include hack/versions.env

SHELL := /usr/bin/env bash -o pipefail
BIN := $(CURDIR)/bin
GO ?= go
export CGO_ENABLED ?= 0
VERSION_PKG := github.com/leasegate/leasegate/internal/version
# What make build stamps: the chart's appVersion and git describe (a commit past a tag, or with local
# changes, says so). Releases stamp the tag and the commit.
DESCRIBE = $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
GO_BUILD = $(GO) build -trimpath -ldflags "-s -w -X $(VERSION_PKG).Version=$(TAG) -X $(VERSION_PKG).Revision=$(DESCRIBE)"

# KUBE_VERSION=1.30 tests against another supported Kubernetes minor (hack/versions.env lists them):
# make controlplane, test, test-envtest and e2e then build and start that minor's kube-apiserver, and the
# Go test harness (which reads KUBE_VERSION too) renders the chart for it.
ifdef KUBE_VERSION
KUBERNETES_VERSION := $(KUBERNETES_VERSION_$(subst .,_,$(KUBE_VERSION)))
ifeq ($(KUBERNETES_VERSION),)
$(error KUBE_VERSION=$(KUBE_VERSION) is not a supported minor: set it to one of $(sort $(subst _,.,$(patsubst KUBERNETES_VERSION_%,%,$(filter KUBERNETES_VERSION_%,$(.VARIABLES))))) (hack/versions.env))
endif
export KUBE_VERSION
endif

# The control plane envtest starts. KUBEBUILDER_ASSETS set by you wins and is never rebuilt.
CONTROLPLANE_DIR := $(BIN)/controlplane/$(KUBERNETES_VERSION)-$(ETCD_VERSION)
ifeq ($(origin KUBEBUILDER_ASSETS),environment)
CONTROLPLANE_DEP :=
else
CONTROLPLANE_DEP := $(CONTROLPLANE_DIR)/kube-apiserver
export KUBEBUILDER_ASSETS := $(CONTROLPLANE_DIR)
endif

STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
TOOLS_DIR := $(BIN)/tools
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)
PROMTOOL := $(TOOLS_DIR)/prometheus-$(PROMETHEUS_VERSION)/promtool
PROMETHEUS := $(TOOLS_DIR)/prometheus-$(PROMETHEUS_VERSION)/prometheus
# A release: VERSION=0.2.0 (or v0.2.0) tags images and binaries v0.2.0 and packages chart 0.2.0.
VERSION ?= $(shell sed -n 's/^appVersion: //p' charts/leasegate/Chart.yaml)
TAG := v$(VERSION:v%=%)
# The chart's image.registry: by default the images are named as the chart installs them.
IMAGE_REGISTRY ?= $(shell sed -n 's/^  registry: //p' charts/leasegate/values.yaml)
RELEASE_DIR ?= $(BIN)/release/$(TAG)

.PHONY: help
help: ## List the targets.
	@awk -F':.*## ' '/^[a-z0-9-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build leasegate-agent, leasegate-webhook and the kubectl plugin kubectl-leasegate into bin/.
	$(GO_BUILD) -o $(BIN)/leasegate-agent ./cmd/agent
	$(GO_BUILD) -o $(BIN)/leasegate-webhook ./cmd/webhook
	$(GO_BUILD) -o $(BIN)/kubectl-leasegate ./cmd/kubectl-leasegate

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
images: ## Build the webhook and agent images for linux/amd64 and linux/arm64 without a Docker engine, into $(RELEASE_DIR): an OCI layout and, per platform, leasegate-images-<tag>-linux-<arch>.tar (kind load image-archive, ctr images import).
	@for arch in amd64 arm64; do for binary in webhook agent; do \
	  echo "building leasegate-$$binary $(TAG) for linux/$$arch"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath \
	    -ldflags "-s -w -X $(VERSION_PKG).Version=$(TAG) -X $(VERSION_PKG).Revision=$$(git rev-parse HEAD)" \
	    -o $(RELEASE_DIR)/linux-$$arch/leasegate-$$binary ./cmd/$$binary || exit 1; \
	done; done
	$(GO) run ./hack/release images --version $(TAG) --revision $$(git rev-parse HEAD) --created $$(git log -1 --format=%ct) \
	  --registry $(IMAGE_REGISTRY) --bin-dir $(RELEASE_DIR) --out $(RELEASE_DIR)

# The kubectl plugin's platforms: those krew users run.
PLUGIN_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64

.PHONY: plugin
plugin: ## The kubectl plugin for each platform krew offers, archived with LICENSE and the completion shim, and the krew manifest with their checksums, into $(RELEASE_DIR).
	@for platform in $(PLUGIN_PLATFORMS); do os=$${platform%/*}; arch=$${platform#*/}; ext=; [[ $$os == windows ]] && ext=.exe; \
	  echo "building kubectl-leasegate $(TAG) for $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath \
	    -ldflags "-s -w -X $(VERSION_PKG).Version=$(TAG) -X $(VERSION_PKG).Revision=$$(git rev-parse HEAD)" \
	    -o $(RELEASE_DIR)/plugin/$$os-$$arch/kubectl-leasegate$$ext ./cmd/kubectl-leasegate || exit 1; \
	done
	$(GO) run ./hack/release plugin --version $(TAG) --created $$(git log -1 --format=%ct) --bin-dir $(RELEASE_DIR)/plugin --out $(RELEASE_DIR) \
	  --license LICENSE --shim cmd/kubectl-leasegate/kubectl_complete-leasegate --manifest krew/leasegate.yaml

.PHONY: push
push: images ## Push the multi-arch images to IMAGE_REGISTRY with your Docker credentials (docker login, credential helpers).
	$(GO) run ./hack/release push --layout $(RELEASE_DIR)/oci --digests $(RELEASE_DIR)/digests.txt

.PHONY: release
release: push plugin $(HELM) ## make release VERSION=x.y.z IMAGE_REGISTRY=...: images pushed, the chart packaged for them, the plugin's archives and krew manifest, changelog, checksums.
	rm -rf $(RELEASE_DIR)/chart && cp -r charts/leasegate $(RELEASE_DIR)/chart
	sed -i 's|^  registry: .*|  registry: $(IMAGE_REGISTRY)|' $(RELEASE_DIR)/chart/values.yaml
	$(HELM) package $(RELEASE_DIR)/chart --version $(TAG:v%=%) --app-version $(TAG) --destination $(RELEASE_DIR) >/dev/null
	rm -rf $(RELEASE_DIR)/chart
	$(GO) run ./hack/release changelog --version $(TAG) >$(RELEASE_DIR)/CHANGELOG.md
	cd $(RELEASE_DIR) && sha256sum leasegate-$(TAG:v%=%).tgz leasegate-images-$(TAG)-*.tar kubectl-leasegate_$(TAG)_*.tar.gz >SHA256SUMS
	@echo "released $(TAG) into $(RELEASE_DIR):" && cat $(RELEASE_DIR)/digests.txt

.PHONY: docker-images
docker-images: ## The same images with a Docker engine, from Dockerfile.webhook and Dockerfile.agent (this platform only).
	docker build -f Dockerfile.webhook --build-arg VERSION=$(TAG) --build-arg REVISION=$$(git rev-parse HEAD) \
	  --build-arg CREATED=$$(date -u -d @$$(git log -1 --format=%ct) +%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE_REGISTRY)/leasegate-webhook:$(TAG) .
	docker build -f Dockerfile.agent --build-arg VERSION=$(TAG) --build-arg REVISION=$$(git rev-parse HEAD) \
	  --build-arg CREATED=$$(date -u -d @$$(git log -1 --format=%ct) +%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE_REGISTRY)/leasegate-agent:$(TAG) .

# images and plugin first: test/release runs make release, images and plugin, which cross-compile the
# images' two binaries for two platforms and the plugin for six. Built here, before any test's clock starts,
# those builds only link from the build cache; done cold inside the package's timeout beside the race-enabled
# e2e specs, they timed out (and loaded the 2 cores the timing-sensitive specs measure on).
# The race detector needs cgo, so a C compiler (`go env CC`, gcc by default): without one the tests run
# without -race, and say so first.
.PHONY: test
test: $(CONTROLPLANE_DEP) $(HELM) $(PROMTOOL) images plugin ## Unit, integration and e2e tests against a real kube-apiserver and etcd (with -race when a C compiler is found), promtool tests of the alerts (CI runs it, then e2e-cluster).
	@cc=$$($(GO) env CC); if command -v "$${cc%% *}" >/dev/null; then race=-race; cgo=1; else race=; cgo=0; \
	  echo "make test: no C compiler ($$cc) for the race detector's cgo: testing WITHOUT -race (apt-get install -y gcc to race)" >&2; fi; \
	  echo "$(GO) test $$race -count=1 -timeout 20m ./..."; \
	  CGO_ENABLED=$$cgo $(GO) test $$race -count=1 -timeout 20m ./...

# The README's commands on this machine as a new user runs them (hack/test-fresh.sh): a clone of HEAD,
# empty GOCACHE and GOMODCACHE, each step's wall time. FRESH_STEPS= stops after the clone; FRESH_RUNS=2
# runs the steps again warm; FRESH_KEEP=1 keeps the folder (FRESH_DIR, default a new temporary one).
FRESH_STEPS ?= demo test
.PHONY: test-fresh
test-fresh: ## The README's make demo and make test in a fresh clone of HEAD with empty Go caches, each step timed (about an hour on 2 cores): before a release, after changing a prerequisite.
	FRESH_STEPS="$(FRESH_STEPS)" FRESH_RUNS="$(FRESH_RUNS)" FRESH_DIR="$(FRESH_DIR)" FRESH_KEEP="$(FRESH_KEEP)" hack/test-fresh.sh

# The suites that start a kube-apiserver (envtest), without the race detector: what differs between
# Kubernetes versions is the API server's behaviour, which `make test` has already raced at the default.
ENVTEST_PACKAGES := ./test/e2e/ ./test/release/

.PHONY: test-envtest
test-envtest: $(CONTROLPLANE_DEP) $(HELM) ## The envtest suites (test/e2e, test/release) against KUBE_VERSION's kube-apiserver (default: the newest).
	$(GO) test -count=1 -timeout 30m $(ENVTEST_PACKAGES)

.PHONY: test-oldest
test-oldest: ## The envtest suites against the oldest supported Kubernetes (KUBERNETES_OLDEST in hack/versions.env); CI runs it.
	$(if $(filter environment,$(origin KUBEBUILDER_ASSETS)),,env -u KUBEBUILDER_ASSETS) $(MAKE) test-envtest KUBE_VERSION=$(KUBERNETES_OLDEST)

# test/chart runs `promtool test rules` on the chart's alerts and parses the dashboard's queries with it;
# the real-cluster suite runs the server. The test harness finds both in bin/tools at PROMETHEUS_VERSION.
.PHONY: promtool prometheus
promtool: $(PROMTOOL) ## Build Prometheus's promtool from the Go module proxy into bin/tools (cached; about 4 min cold).
prometheus: $(PROMETHEUS) ## Build the Prometheus server (no web UI) from the Go module proxy into bin/tools, for the real-cluster suite (cached).

$(PROMTOOL) $(PROMETHEUS): hack/versions.env hack/build-prometheus.sh
	BIN_DIR=$(BIN) hack/build-prometheus.sh $(@F) >/dev/null
	@touch $@

# As root, `make e2e` runs the real-cluster specs too.
ROOT := $(filter 0,$(shell id -u))

.PHONY: e2e
e2e: $(CONTROLPLANE_DEP) $(HELM) $(if $(ROOT),cluster-prerequisites) ## The Ginkgo e2e suite, verbose (as root, then the real-cluster suite).
	$(GO) test -v -count=1 -timeout 40m ./test/e2e/ -ginkgo.v
	$(if $(ROOT),$(CLUSTER_SUITE) -ginkgo.v)

# The real-cluster specs run as root: they make a bridge, iptables chains, cgroups and mounts, and remove
# them. The Debian packages they need are installed when missing.
CLUSTER_SUITE := $(GO) test -v -count=1 -timeout 40m ./test/realcluster/ -cluster

.PHONY: cluster-prerequisites
cluster-prerequisites: cluster-binaries $(HELM) $(PROMETHEUS)
	@missing=""; for p in containerd runc iptables conntrack; do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	  [ -x /usr/lib/cni/bridge ] || missing="$$missing containernetworking-plugins"; \
	  if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

.PHONY: e2e-cluster
e2e-cluster: cluster-prerequisites ## As root: start a real single-node cluster, helm install leasegate, run the chaos specs, tear it all down.
	$(CLUSTER_SUITE) -ginkgo.v

.PHONY: bench
bench: $(CONTROLPLANE_DEP) cluster-prerequisites ## Go benchmarks of the hot paths, the failover table, the fence under load, and (root) the real-cluster table.
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...
	$(GO) run ./test/bench/failover -runs 20
	$(GO) run ./test/bench/electionsperpod
	$(GO) run ./test/bench/gate -rate 1000 -duration 10s
	$(GO) run ./test/bench/fence -rate 1000 -duration 10s -leases 1000,5000,10000 -guards 10,100,1000
	$(GO) run ./test/bench/provisioning -leases 1000,5000 -candidates 3
	$(GO) run ./test/bench/leases -leases 1000,5000 -candidates 3 -client agent,client-go -restarts apiserver,etcd
	$(GO) test -count=1 -timeout 30m ./test/e2e/ -ginkgo.label-filter=multicluster -multicluster.runs 20 -multicluster.report $(BIN)/multicluster-bench.md
	@cat $(BIN)/multicluster-bench.md
	$(CLUSTER_SUITE) -cluster.runs 20 -cluster.report $(BIN)/cluster-bench.md
	@cat $(BIN)/cluster-bench.md

# Each fuzz target runs on its own for FUZZTIME, a duration or a count of inputs (20000x); a failing
# input is saved under the package's testdata/fuzz/ and replayed by every `go test` from then on (commit
# it with the fix). CI uses a count: with a duration, Go 1.26's fuzzing coordinator can report its own
# deadline as a failure (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Fuzz every parser of outside input (admission bodies, config, annotations, settings) for FUZZTIME each (CI: 20000x).
	@mkdir -p $(BIN); for pkg in $$($(GO) list ./internal/...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzzing $$target ($$pkg) for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg >$(BIN)/fuzz.log 2>&1 || { cat $(BIN)/fuzz.log; exit 1; }; \
	  done; \
	done

.PHONY: demo
demo: $(CONTROLPLANE_DEP) ## The webhook injects agents into a labelled namespace's pods; they elect a leader and fail over.
	$(GO) run ./test/demo $(ARGS)

# The API packages whose deepcopy functions controller-gen writes (zz_generated.deepcopy.go in each).
API_PACKAGES := pkg/multicluster/v1alpha1

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Write the API's deepcopy functions (zz_generated.deepcopy.go) with controller-gen.
	$(CONTROLLER_GEN) object $(foreach pkg,$(API_PACKAGES),paths=./$(pkg))

.PHONY: lint
lint: $(STATICCHECK) $(CONTROLLER_GEN) ## gofmt, go vet, staticcheck, and the generated deepcopy functions against what controller-gen writes.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [[ -n $$unformatted ]]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@generated=$$(mktemp -d) && trap 'rm -rf "$$generated"' EXIT && \
	  for pkg in $(API_PACKAGES); do \
	    $(CONTROLLER_GEN) object paths=./$$pkg output:object:dir="$$generated/$$pkg" && \
	    diff -u $$pkg/zz_generated.deepcopy.go "$$generated/$$pkg/zz_generated.deepcopy.go" || \
	      { echo "$$pkg/zz_generated.deepcopy.go differs from what controller-gen writes: run make generate"; exit 1; }; \
	  done

$(STATICCHECK):
	GOBIN=$(BIN)/.staticcheck $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN)/.staticcheck/staticcheck $@

$(CONTROLLER_GEN):
	GOBIN=$(BIN)/.controller-gen $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/.controller-gen/controller-gen $@

.PHONY: clean
clean: ## Remove bin/, except the cached control plane.
	find $(BIN) -mindepth 1 -maxdepth 1 ! -name controlplane -exec rm -rf {} +
