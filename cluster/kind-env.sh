# Source me after `make kind-up`: KUBECONFIG for the kind cluster, and how the e2e suite
# reads the node's cgroups (the kind node is a Docker container).
# shellcheck shell=bash
KIND_CLUSTER=${KIND_CLUSTER:-decor}
export KUBECONFIG=${KIND_KUBECONFIG:-${XDG_CACHE_HOME:-$HOME/.cache}/decor/kind-$KIND_CLUSTER.kubeconfig}
export DECOR_E2E_NODE_EXEC="docker exec $KIND_CLUSTER-control-plane"
