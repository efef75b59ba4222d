#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy into $BIN_DIR/controlplane/<k8s>-<etcd>/, the
# directory envtest reads through KUBEBUILDER_ASSETS. Nothing is downloaded as a release binary: machines
# that run leasegate's tests are often offline except for a Go module proxy.
#
# COMPONENTS names the Kubernetes binaries to build (default: kube-apiserver and kubectl, which the e2e
# suite runs the documented break-glass commands with); the real-cluster suite adds
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy (`make cluster-binaries`).
#
# A second run is a no-op: each binary is rebuilt only when it is missing or reports another version.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" controlplane
dest="$bin_dir/controlplane/${KUBERNETES_VERSION}-${ETCD_VERSION}"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

# version_of <name> <binary>: what the binary says its version is, as "Kubernetes vX.Y.Z".
version_of() {
  if [[ $1 == kubectl ]]; then
    "$2" version --client 2>/dev/null | sed -n 's/^Client Version: /Kubernetes /p'
  else
    "$2" --version 2>/dev/null
  fi
}

# build_component <name>: one binary of k8s.io/kubernetes/cmd/<name>, with the version stamped in.
build_component() {
  local component=$1
  local out="$dest/$component"
  if [[ -x $out && $(version_of "$component" "$out") == "Kubernetes ${KUBERNETES_VERSION}" ]]; then
    log "$component ${KUBERNETES_VERSION} is cached"
    return
  fi
  log "building $component ${KUBERNETES_VERSION} from the Go module proxy (kube-apiserver takes about 5 min cold, the others about 1 min each after it)"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  local staging=${KUBERNETES_VERSION/v1./v0.}
  local upstream_mod
  upstream_mod=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" |
    sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  {
    echo "module leasegate.local/controlplane"
    echo
    grep '^go ' "$upstream_mod"
    echo
    echo "require k8s.io/kubernetes ${KUBERNETES_VERSION}"
    echo
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging; outside
    # its repository those replacements must point at the published modules of the same release.
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging"'#p' "$upstream_mod"
  } >"$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/%s"\n' "$component" >"$work/tools.go"
  (
    cd "$work"
    # -e: packages of k8s.io/kubernetes that cmd/<component> does not build may fail to load; a failure
    # of tidy itself still stops here, with what go said.
    quiet env GOFLAGS=-mod=mod go mod tidy -e
    local pkg=k8s.io/component-base/version
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$out" -ldflags "-s -w \
      -X $pkg.gitVersion=${KUBERNETES_VERSION} \
      -X $pkg.gitMajor=$(cut -d. -f1 <<<"${KUBERNETES_VERSION#v}") \
      -X $pkg.gitMinor=$(cut -d. -f2 <<<"${KUBERNETES_VERSION}") \
      -X $pkg.gitTreeState=clean" "k8s.io/kubernetes/cmd/$component"
  )
  log "$component: $(version_of "$component" "$out")"
}

build_etcd() {
  local out="$dest/etcd"
  # Not `| grep -q`: grep exits at the first line, etcd dies of SIGPIPE writing the rest, and pipefail
  # turns a cached binary into a rebuild.
  if [[ -x $out && $("$out" --version 2>/dev/null) == *"etcd Version: ${ETCD_VERSION#v}"* ]]; then
    log "etcd ${ETCD_VERSION} is cached"
    return
  fi
  log "building etcd ${ETCD_VERSION} from the Go module proxy"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  (
    cd "$work"
    printf 'module leasegate.local/etcd\n\ngo 1.24\n' >go.mod
    cat >tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    quiet env GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out" go.etcd.io/etcd/server/v3
  )
  log "etcd: $("$out" --version | head -1)"
}

build_etcd
for component in ${COMPONENTS:-kube-apiserver kubectl}; do
  build_component "$component"
done
echo "$dest"
