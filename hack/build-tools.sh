#!/usr/bin/env bash
# Builds the tools the chart tests use from the Go module proxy into $BIN_DIR/tools: helm, and
# cert-manager's controller and cainjector, plus cert-manager's and the Prometheus Operator's CRDs.
# Cached: a second run is a no-op.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" tools
tools="$bin_dir/tools"
mkdir -p "$tools"
tools=$(cd "$tools" && pwd)

helm="$tools/helm-$HELM_VERSION"
if [[ -x $helm ]]; then
  log "helm $HELM_VERSION is cached"
else
  log "building helm $HELM_VERSION"
  LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    build_in_module "helm.sh/helm/v3@$HELM_VERSION" helm.sh/helm/v3/cmd/helm "$helm"
fi

cm="$tools/cert-manager-$CERT_MANAGER_BINARIES_VERSION"
mkdir -p "$cm"
for component in controller cainjector; do
  if [[ -x $cm/$component ]]; then
    log "cert-manager $component $CERT_MANAGER_BINARIES_VERSION is cached"
    continue
  fi
  log "building cert-manager $component $CERT_MANAGER_BINARIES_VERSION (about 3 min cold)"
  # v1.11.5 needs the dns version it was released with; newer ones changed an API it uses.
  build_in_module "github.com/cert-manager/cert-manager@$CERT_MANAGER_BINARIES_VERSION" \
    "github.com/cert-manager/cert-manager/cmd/$component" "$cm/$component" \
    "replace github.com/miekg/dns v1.1.41 => github.com/miekg/dns v1.1.34"
done

# fetch_module_files <module@version> <destination> <files...>: copies files (globs relative to the
# module's root) out of a module the proxy serves, as plain YAML.
fetch_module_files() {
  local module=$1 destination=$2
  shift 2
  local dir
  dir=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$destination.tmp"
  for pattern in "$@"; do
    cp "$dir"/$pattern "$destination.tmp/"
  done
  chmod -R u+w "$destination.tmp"
  mv "$destination.tmp" "$destination"
}

crds="$tools/cert-manager-crds-$CERT_MANAGER_CRDS_VERSION"
if [[ -d $crds ]]; then
  log "cert-manager CRDs $CERT_MANAGER_CRDS_VERSION are cached"
else
  log "fetching cert-manager CRDs $CERT_MANAGER_CRDS_VERSION"
  fetch_module_files "github.com/cert-manager/cert-manager@$CERT_MANAGER_CRDS_VERSION" "$crds" 'deploy/crds/*.yaml'
fi

crds="$tools/prometheus-operator-crds-$PROMETHEUS_OPERATOR_VERSION"
if [[ -d $crds ]]; then
  log "Prometheus Operator CRDs $PROMETHEUS_OPERATOR_VERSION are cached"
else
  log "fetching the Prometheus Operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs $PROMETHEUS_OPERATOR_VERSION"
  fetch_module_files "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" "$crds" \
    example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml
fi
echo "$tools"
