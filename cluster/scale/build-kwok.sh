#!/usr/bin/env bash
# Build (or reuse) kwok from the Go module proxy at a pinned version into
# $DECOR_CACHE/kwok-$KWOK_VERSION/bin (outside the repo, keyed by version), like
# cluster/build-k8s.sh does for Kubernetes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=build-kwok
. "$here/lib.sh"

# kwok runs only the Stages it is given: the upstream "fast" node and pod stages and node
# heartbeats through Leases, from the same pinned module, into one file beside the binary.
write_stages() {
  local src
  src=$(GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$src/kustomize/stage" ] || die "no stages in sigs.k8s.io/kwok@$KWOK_VERSION"
  local f first=1
  for f in "$src"/kustomize/stage/node/fast/node-initialize.yaml \
           "$src"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           "$src"/kustomize/stage/pod/fast/pod-*.yaml; do
    [ "$first" = 1 ] || echo "---"; first=0
    cat "$f"
  done > "$KWOK_BIN/stages.yaml"
}
if [ -x "$KWOK_BIN/kwok" ] && [ -f "$KWOK_BIN/.complete" ] && [ -s "$KWOK_BIN/stages.yaml" ]; then
  log "cached: $KWOK_BIN"; exit 0
fi
go_build_cached "$KWOK_BIN" sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
write_stages
"$KWOK_BIN/kwok" --version >&2 || true
