#!/usr/bin/env bash
# Fetch the Prometheus Operator's ServiceMonitor and PodMonitor CRDs (their OpenAPI schemas)
# at a pinned version and print the directory that holds them.
# They come from the prometheus-operator Go module (example/prometheus-operator-crd/), fetched
# with `go mod download` through the Go module proxy: the go command checks the module's
# go.sum hash, and this script checks the hash below and each file's SHA-256. The files are
# cached outside the repository, keyed by version; tests/unit/test_monitors.py validates the
# chart's rendered monitors against them.
set -euo pipefail
version=v0.79.2
module_sum="h1:H/HCiMS4dXQyiFHw28PFlWMh15YUraL3MFe8u7k7dGA="
declare -A file_sha256=(
  [monitoring.coreos.com_podmonitors.yaml]=0d40a9e5bf3c80e2efaa62e67c3ffc6aac91bb3c1fba3120762361f6e3036dd7
  [monitoring.coreos.com_servicemonitors.yaml]=86955dec8ac2818f5248a60e470aea98144daef9f4453f39e31399af511ec3ab
)
cache=${DECOR_CACHE:-/var/cache/decor}
out="$cache/monitoring-crds-$version"
log() { printf '[monitoring-crds] %s\n' "$*" >&2; }
if [ ! -f "$out/.complete" ]; then
  command -v go >/dev/null || { log "needs the go toolchain on PATH"; exit 1; }
  gomodcache="$cache/gomod"
  log "downloading github.com/prometheus-operator/prometheus-operator@$version"
  info=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod GOMODCACHE="$gomodcache" \
    go mod download -json "github.com/prometheus-operator/prometheus-operator@$version")
  field() { printf '%s' "$info" | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
  [ "$(field Sum)" = "$module_sum" ] || { log "module hash $(field Sum) != $module_sum"; exit 1; }
  dir="$(field Dir)/example/prometheus-operator-crd"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  for name in "${!file_sha256[@]}"; do
    cp "$dir/$name" "$out.tmp/$name"
    echo "${file_sha256[$name]}  $out.tmp/$name" | sha256sum -c --quiet - >&2
  done
  rm -rf "$out"; mv "$out.tmp" "$out"; touch "$out/.complete"
fi
echo "$out"
