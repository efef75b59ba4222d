#!/usr/bin/env bash
# Builds Prometheus's promtool and (for the real-cluster suite) its server from the Go module proxy into
# $BIN_DIR/tools/prometheus-$PROMETHEUS_VERSION: `hack/build-prometheus.sh promtool prometheus`.
# Cached: a component already built is not built again.
#
# Built with `-tags remove_all_sd`: no service discovery but static, file and HTTP, which is all the
# tests use (the real-cluster harness writes its targets into files), and a third of the cold build time.
# The server is built without its embedded web UI (the `builtinassets` tag needs the UI compiled with
# npm): its API, which the harness queries, is whole.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" prometheus
(($#)) || set -- promtool
dir="$bin_dir/tools/prometheus-$PROMETHEUS_VERSION"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# The module's tags are v0.3xx.y for Prometheus 3.xx.y (v0.305.1 is 3.5.1).
minor_patch=${PROMETHEUS_VERSION#v0.}
release=3.$((${minor_patch%%.*} - 300)).${minor_patch#*.}
for component in "$@"; do
  case $component in
    promtool | prometheus) ;;
    *)
      log "unknown component $component: promtool or prometheus"
      exit 1
      ;;
  esac
  if [[ -x $dir/$component ]]; then
    log "$component $release is cached"
    continue
  fi
  log "building $component $release ($PROMETHEUS_VERSION; a few minutes cold)"
  TAGS=remove_all_sd LDFLAGS="-X github.com/prometheus/common/version.Version=$release" \
    build_in_module "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" \
    "github.com/prometheus/prometheus/cmd/$component" "$dir/$component"
done
echo "$dir"
