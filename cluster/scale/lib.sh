# Settings of the scale test bed (sourced, not run). The scale bed is a SEPARATE etcd +
# kube-apiserver + kube-scheduler + kwok + Prometheus on its own ports and state dirs; it
# reuses the binaries of the main test bed (cluster/lib.sh) and never touches its state.
# shellcheck shell=bash disable=SC2034  # the settings are used by the scripts that source this
_scale_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=cluster/lib.sh
. "$_scale_dir/../lib.sh"

# --- versions ------------------------------------------------------------------------------
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}         # sigs.k8s.io/kwok module version
KWOK_BIN=$DECOR_CACHE/kwok-$KWOK_VERSION/bin
# The Kubernetes binaries of the main test bed (cluster/build-k8s.sh), reused as they are.
SCALE_K8S_BIN=${DECOR_SCALE_K8S_BIN:-$K8S_BIN}

# --- places (never the main bed's /var/lib/decor-cluster or /run/decor-cluster) -------------
SCALE_STATE=${DECOR_SCALE_STATE:-/var/lib/decor-scale}
SCALE_RUN=${DECOR_SCALE_RUN:-/run/decor-scale}
SCALE_PKI=$SCALE_STATE/pki
SCALE_LOGS=$SCALE_STATE/logs
SCALE_ETCD_DATA=$SCALE_STATE/etcd
SCALE_PROM_DATA=$SCALE_STATE/prometheus
SCALE_CONFIG=$SCALE_STATE/config
SCALE_AUDIT_LOG=$SCALE_LOGS/audit.log
SCALE_KUBECONFIG=$SCALE_STATE/admin.kubeconfig

# --- ports on 127.0.0.1 (the main bed uses 6443, 10248-10259, 12379-12381) -----------------
SCALE_ETCD_CLIENT_PORT=${DECOR_SCALE_ETCD_CLIENT_PORT:-22379}
SCALE_ETCD_PEER_PORT=${DECOR_SCALE_ETCD_PEER_PORT:-22380}
SCALE_ETCD_METRICS_PORT=${DECOR_SCALE_ETCD_METRICS_PORT:-22381}
SCALE_APISERVER_PORT=${DECOR_SCALE_APISERVER_PORT:-7443}
SCALE_SCHEDULER_PORT=${DECOR_SCALE_SCHEDULER_PORT:-20259}
SCALE_KWOK_PORT=${DECOR_SCALE_KWOK_PORT:-20247}
SCALE_PROMETHEUS_PORT=${DECOR_SCALE_PROMETHEUS_PORT:-19090}
SCALE_SIMULATOR_PORT=${DECOR_SCALE_SIMULATOR_PORT:-19100}
SCALE_SCRAPE_INTERVAL_S=${DECOR_SCALE_SCRAPE_INTERVAL_S:-5}
# How long each daemon of the bed may take to start (.ci/run gives more: its smoke run starts in
# the idle cgroup beside the e2e lanes, and there the API server took more than 120 s).
SCALE_START_TIMEOUT_S=${DECOR_SCALE_START_TIMEOUT_S:-120}

# --- fake nodes ----------------------------------------------------------------------------
SCALE_CPU_NODES=${DECOR_SCALE_CPU_NODES:-10}           # kwok nodes with CPU only
SCALE_GPU_NODES=${DECOR_SCALE_GPU_NODES:-2}            # kwok nodes that also have GPUs
SCALE_NODE_CPU_CORES=${DECOR_SCALE_NODE_CPU_CORES:-64}
SCALE_NODE_MEMORY=${DECOR_SCALE_NODE_MEMORY:-512Gi}
SCALE_NODE_GPUS=${DECOR_SCALE_NODE_GPUS:-8}
SCALE_NODE_MAX_PODS=${DECOR_SCALE_NODE_MAX_PODS:-250}

# --- the operator: replicas electing a leader through a Lease, as the chart runs it ---------
SCALE_OPERATOR_REPLICAS=${DECOR_SCALE_OPERATOR_REPLICAS:-2}   # client identities made (bench: --replicas)
SCALE_LEASE_NAMESPACE=${DECOR_SCALE_LEASE_NAMESPACE:-decor-system}

# Client identities (certificate CNs): the audit log tells the operator's requests apart, and
# each replica's from the other's (replica N is user decor-operator-N, operator-N.kubeconfig).
SCALE_USERS="admin:decor-scale-admin:system:masters
simulator:decor-scale-simulator:system:masters kwok:decor-scale-kwok:system:masters
scheduler:kube-scheduler: driver:decor-scale-driver:system:masters"
SCALE_OPERATOR_USERS=""
for _replica in $(seq 0 $((SCALE_OPERATOR_REPLICAS - 1))); do
  SCALE_USERS+=" operator-$_replica:decor-operator-$_replica:system:masters"
  SCALE_OPERATOR_USERS+="${SCALE_OPERATOR_USERS:+, }decor-operator-$_replica"
done
unset _replica

scale_kubeconfig() { echo "$SCALE_STATE/$1.kubeconfig"; }
unset _scale_dir
