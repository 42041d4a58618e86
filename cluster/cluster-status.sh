#!/usr/bin/env bash
# Show the test bed's processes, node and pods. Exit 0 when the node is Ready, 1 otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=cluster-status
. "$here/lib.sh"
up=0
for n in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet; do
  f=$CLUSTER_RUN/$n.pid
  if [ -f "$f" ] && [ -d "/proc/$(cat "$f")" ]; then
    printf '  %-24s running (pid %s)\n' "$n" "$(cat "$f")"; up=$((up + 1))
  else
    printf '  %-24s stopped\n' "$n"
  fi
done
bash "$here/registry.sh" status || true
echo "  KUBECONFIG=$KUBECONFIG_ADMIN"
echo "  logs: $LOGS"
[ $up -gt 0 ] && [ -x "$TOOLS_BIN/kubectl" ] || { echo "cluster: down"; exit 1; }
kc() { timeout 20 "$TOOLS_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
kc get nodes -o wide || { echo "cluster: API not reachable"; exit 1; }
kc get node "$NODE_NAME" -o jsonpath='  capacity: cpu={.status.capacity.cpu} memory={.status.capacity.memory} nvidia.com/gpu={.status.capacity.nvidia\.com/gpu}{"\n"}'
kc get pods -A -o wide
ready=$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
[ "$ready" = True ] && { echo "cluster: up (node Ready)"; exit 0; }
echo "cluster: node not Ready"; exit 1
