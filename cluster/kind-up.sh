#!/usr/bin/env bash
# `make kind-up`: DECOR's e2e environment on kind, for machines with Docker.
# NOT run on the project's own machines (they have no Docker engine); written to mirror
# cluster-up.sh + build-images.sh. Steps: create the kind cluster (Kubernetes >= 1.35),
# build the trainer and operator images with `docker build`, `kind load docker-image` them,
# advertise nvidia.com/gpu on the node, and write cluster/kind-env.sh's kubeconfig.
# Then: `. cluster/kind-env.sh && make e2e` (or `CLUSTER=kind bash cluster/e2e.sh`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
KIND_CLUSTER=${KIND_CLUSTER:-decor}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.35.0}
GPU_CAPACITY=${DECOR_GPU_CAPACITY:-8}
TRAINER_IMAGE=localhost/decor/trainer:0.1.0
OPERATOR_IMAGE=localhost/decor/operator:0.1.0
KIND_KUBECONFIG=${KIND_KUBECONFIG:-${XDG_CACHE_HOME:-$HOME/.cache}/decor/kind-$KIND_CLUSTER.kubeconfig}
log() { printf '[%s kind-up] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[%s kind-up] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

for tool in docker kind kubectl; do command -v "$tool" >/dev/null || die "$tool not found on PATH"; done
docker info >/dev/null 2>&1 || die "the Docker engine is not reachable (docker info failed)"
kv=$(kubectl version --client -o json | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -1)
[ "${kv:-0}" -ge 35 ] || log "warning: kubectl 1.$kv is older than 1.35 (the resize subresource needs a recent kubectl)"

mkdir -p "$(dirname "$KIND_KUBECONFIG")"
if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  log "kind cluster $KIND_CLUSTER exists"
else
  log "creating kind cluster $KIND_CLUSTER ($KIND_NODE_IMAGE)"
  kind create cluster --name "$KIND_CLUSTER" --image "$KIND_NODE_IMAGE" \
    --config "$here/kind-config.yaml" --kubeconfig "$KIND_KUBECONFIG" --wait 180s
fi
kind get kubeconfig --name "$KIND_CLUSTER" > "$KIND_KUBECONFIG"
export KUBECONFIG=$KIND_KUBECONFIG
node=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')
ver=$(kubectl get node "$node" -o jsonpath='{.status.nodeInfo.kubeletVersion}')
minor=${ver#v1.}; minor=${minor%%.*}
[ "$minor" -ge 35 ] || die "node $node runs $ver; DECOR needs Kubernetes >= 1.35 (set KIND_NODE_IMAGE)"

log "docker build $TRAINER_IMAGE (trainer_image/Dockerfile)"
[ -f "$root/trainer_image/Dockerfile" ] || die "trainer_image/Dockerfile not found"
docker build -t "$TRAINER_IMAGE" -f "$root/trainer_image/Dockerfile" "$root"
log "docker build $OPERATOR_IMAGE (operator/Dockerfile)"
docker build -t "$OPERATOR_IMAGE" -f "$root/operator/Dockerfile" "$root"
log "kind load docker-image"
kind load docker-image --name "$KIND_CLUSTER" "$TRAINER_IMAGE" "$OPERATOR_IMAGE"

log "advertising nvidia.com/gpu: $GPU_CAPACITY on $node"
kubectl patch node "$node" --subresource=status --type=json \
  -p "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$GPU_CAPACITY\"}]" >/dev/null
kubectl wait --for=condition=Ready "node/$node" --timeout=120s >/dev/null
for _ in $(seq 1 30); do
  [ "$(kubectl get node "$node" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = "$GPU_CAPACITY" ] && break
  sleep 1
done
log "kind cluster $KIND_CLUSTER ready: node $node ($ver)"
log "run the e2e suite: . cluster/kind-env.sh && make e2e   (or: CLUSTER=kind bash cluster/e2e.sh)"
echo "$KIND_KUBECONFIG"
