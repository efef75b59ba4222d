# Sourced by the hack/ build scripts, with the prefix their log lines carry:
#   source "$(dirname "$0")/lib.sh" controlplane
# It sets what they all need: strict mode, `here` (this folder), the pinned versions, `bin_dir` (BIN_DIR
# or bin/), `log`, `quiet`, which runs a noisy command and shows its output only when it fails, and
# `build_in_module`, which builds a tool's package in a module of its own.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# KUBE_VERSION=1.30 selects another supported minor's kube-apiserver (versions.env lists them).
if [[ -n ${KUBE_VERSION:-} ]]; then
  selected=KUBERNETES_VERSION_${KUBE_VERSION//./_}
  if [[ -z ${!selected:-} ]]; then
    echo "KUBE_VERSION=$KUBE_VERSION is not a supported minor: hack/versions.env has no $selected (set KUBE_VERSION to one of: $(sed -n 's/^KUBERNETES_VERSION_\([0-9]*\)_\([0-9]*\)=.*/\1.\2/p' "$here/versions.env" | tr '\n' ' '))" >&2
    exit 1
  fi
  KUBERNETES_VERSION=${!selected}
fi
bin_dir=${BIN_DIR:-$here/../bin}
log_prefix=$1

log() { printf '[%s] %s\n' "$log_prefix" "$*" >&2; }

# quiet <command...>: runs it; on failure prints what it said and fails, rather than leaving the next step
# to fail on what this one did not do.
quiet() {
  local out
  if ! out=$("$@" 2>&1); then
    log "failed in $PWD: $*"
    printf '%s\n' "$out" >&2
    return 1
  fi
}

# build_in_module <module@version> <package> <output> [go.mod lines...]: builds one package in a throwaway
# module, so none of these tools' dependencies enter leasegate's go.mod. LDFLAGS and TAGS (build tags)
# are passed on; the output appears only once the build has succeeded.
build_in_module() {
  local module=$1 pkg=$2 out=$3
  shift 3
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  (
    cd "$work"
    printf 'module leasegate.local/tools\n\ngo 1.26\n' >go.mod
    for line in "$@"; do echo "$line" >>go.mod; done
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >tools.go
    quiet env GOFLAGS=-mod=mod go get "$module"
    quiet env GOFLAGS=-mod=mod go mod tidy
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath ${TAGS:+-tags "$TAGS"} -ldflags "-s -w ${LDFLAGS:-}" -o "$out.tmp" "$pkg"
    mv "$out.tmp" "$out"
  )
}
