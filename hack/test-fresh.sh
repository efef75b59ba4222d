#!/usr/bin/env bash
# make test-fresh: the README's commands as a new user runs them on this machine. A clone of this
# checkout's HEAD (what is committed: local changes are not in it) in a new folder, empty Go build and
# module caches there, an environment with nothing of this shell's but PATH, HOME, the locale and the Go
# proxy settings, and each make target of FRESH_STEPS run in turn and timed. The README's figures come
# from this.
#
#   FRESH_STEPS  the make targets, in order (default "demo test"); empty: stop after the clone
#   FRESH_RUNS   how many times to run them (default 1); the second run is the warm one (same bin/, caches)
#   FRESH_DIR    where (default a new temporary folder); removed after a green run unless FRESH_KEEP=1
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${FRESH_STEPS-demo test}
runs=${FRESH_RUNS:-1}
dir=${FRESH_DIR:-}
[[ -n $dir ]] || dir=$(mktemp -d "${TMPDIR:-/tmp}/leasegate-fresh.XXXXXX")
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
clone=$dir/leasegate

say() { printf '[test-fresh] %s\n' "$*" >&2; }

commit=$(git -C "$root" rev-parse HEAD)
if [[ -n $(git -C "$root" status --porcelain --untracked-files=no) ]]; then
  say "note: $root has uncommitted changes; the clone has only commit $commit"
fi
say "in $dir: commit $commit, $(go version 2>/dev/null || echo 'no go on PATH'), $(nproc) cores, uid $(id -u)"
git clone --quiet "$root" "$clone"
git -C "$clone" checkout --quiet --detach "$commit"

# Empty caches and a clean environment: no KUBEBUILDER_ASSETS, CGO_ENABLED, KUBE_VERSION or MAKEFLAGS from
# a make that runs this, no GOCACHE or GOMODCACHE of this machine's.
fresh_env=(HOME="$HOME" PATH="$PATH" GOCACHE="$dir/gocache" GOMODCACHE="$dir/gomodcache" TMPDIR="${TMPDIR:-/tmp}")
for name in USER LOGNAME LANG LC_ALL TERM GOPROXY GONOSUMDB GONOSUMCHECK GOPRIVATE GOINSECURE GOSUMDB GOTOOLCHAIN \
  http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  if [[ -n ${!name:-} ]]; then fresh_env+=("$name=${!name}"); fi
done
mkdir -p "$dir/gocache" "$dir/gomodcache"

times=()
report() {
  local line
  say "times (commit ${commit:0:12}, $(nproc) cores):"
  for line in "${times[@]}"; do say "  $line"; done
}
for ((run = 1; run <= runs; run++)); do
  state=cold
  ((run == 1)) || state=warm
  for step in $steps; do
    say "run $run ($state): make $step, log $dir/$step-$run.log"
    start=$(date +%s)
    if env -i "${fresh_env[@]}" make -C "$clone" "$step" 2>&1 | tee "$dir/$step-$run.log"; then
      times+=("make $step ($state): $(($(date +%s) - start)) s")
    else
      times+=("make $step ($state): FAILED after $(($(date +%s) - start)) s")
      report
      say "kept $dir for a look (the clone, both caches, each step's log)"
      exit 1
    fi
  done
done
if ((${#times[@]})); then report; fi
if [[ ${FRESH_KEEP:-} == 1 || -z $steps ]]; then
  say "kept $dir"
else
  chmod -R u+w "$dir" && rm -rf "$dir"
fi
