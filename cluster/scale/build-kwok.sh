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
if [ -x "$KWOK_BIN/kwok" ] && [ -f "$KWOK_BIN/.complete" ]; then
  [ -s "$KWOK_BIN/stages.yaml" ] || write_stages
  log "cached: $KWOK_BIN"; exit 0
fi
command -v go >/dev/null || die "go not found on PATH (kwok $KWOK_VERSION needs Go >= 1.26)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
export GOPROXY=${GOPROXY:-$(go env GOPROXY)}
out=$(dirname "$KWOK_BIN")/out
rm -rf "$out"; mkdir -p "$out"
log "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION -> $KWOK_BIN (go $(go env GOVERSION))"
t0=$SECONDS
GOBIN=$out go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
[ -x "$out/kwok" ] || die "kwok binary missing from $out"
rm -rf "$KWOK_BIN"; mv "$out" "$KWOK_BIN"
write_stages
printf 'kwok %s go %s build_s %s\n' "$KWOK_VERSION" "$(go env GOVERSION)" "$((SECONDS - t0))" > "$KWOK_BIN/.complete"
"$KWOK_BIN/kwok" --version >&2 || true
log "done in $((SECONDS - t0))s: $KWOK_BIN"
