#!/usr/bin/env bash
# Start the scale test bed: its own etcd, kube-apiserver (with an audit log), kube-scheduler,
# kwok with fake nodes, the real Prometheus, and the SIMULATED trainer fleet
# (bench/scale/simulator.py). Everything on 127.0.0.1, state under $SCALE_STATE; the main test
# bed (cluster/cluster-up.sh) keeps running untouched beside it. Prints the admin kubeconfig.
# Settings: cluster/scale/lib.sh (DECOR_SCALE_* environment). See docs/benchmarks/scale/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LOG_TAG=scale-up
. "$here/lib.sh"
PY=${PY:-python3}

for b in etcd kube-apiserver kube-scheduler; do
  [ -x "$SCALE_K8S_BIN/$b" ] || "$here/../build-k8s.sh"
done
"$here/build-kwok.sh"
command -v prometheus >/dev/null || apt_ensure prometheus
command -v openssl >/dev/null || apt_ensure openssl curl

pidfile() { echo "$SCALE_RUN/$1.pid"; }
running() { local f; f=$(pidfile "$1"); [ -f "$f" ] && [ -d "/proc/$(cat "$f")" ]; }
start_daemon() { # start_daemon NAME BINARY ARGS...: detached, logs in $SCALE_LOGS/NAME.log
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "$(pidfile "$name")"))"; return 0; fi
  log "starting $name"
  setsid "$@" >>"$SCALE_LOGS/$name.log" 2>&1 </dev/null &
  echo $! > "$(pidfile "$name")"
}
dump_log() { log "last lines of $SCALE_LOGS/$1.log:"; tail -n 30 "$SCALE_LOGS/$1.log" >&2 || true; }

# A bed whose processes died without scale-down leaves etcd data behind: start clean.
if ! running etcd && [ -d "$SCALE_ETCD_DATA" ]; then
  log "clearing the leftovers of a scale bed that was not taken down"
  bash "$here/scale-down.sh"
fi
mkdir -p "$SCALE_RUN" "$SCALE_STATE" "$SCALE_LOGS" "$SCALE_CONFIG"

# --- certificates: cluster/pki.sh into this bed's own state, plus one identity per client ---
CLUSTER_STATE=$SCALE_STATE bash "$here/../pki.sh"
client_cert() { # client_cert FILE CN ORG
  [ -f "$SCALE_PKI/$1.crt" ] && return 0
  local subj="/CN=$2"; [ -n "$3" ] && subj="/O=$3/CN=$2"
  openssl genrsa -out "$SCALE_PKI/$1.key" 2048 2>/dev/null
  openssl req -new -key "$SCALE_PKI/$1.key" -subj "$subj" -out "$SCALE_PKI/$1.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > "$SCALE_PKI/$1.ext"
  openssl x509 -req -in "$SCALE_PKI/$1.csr" -CA "$SCALE_PKI/ca.crt" -CAkey "$SCALE_PKI/ca.key" \
    -CAcreateserial -sha256 -days 3650 -extfile "$SCALE_PKI/$1.ext" -out "$SCALE_PKI/$1.crt" 2>/dev/null
  rm -f "$SCALE_PKI/$1.csr" "$SCALE_PKI/$1.ext"; chmod 600 "$SCALE_PKI/$1.key"
}
server=https://127.0.0.1:$SCALE_APISERVER_PORT
while read -r entry; do
  [ -n "$entry" ] || continue
  IFS=: read -r file cn org <<<"$entry"
  [ "$file" = scheduler ] && { cn=system:kube-scheduler; org=; }
  client_cert "scale-$file" "$cn" "$org"
  cat > "$(scale_kubeconfig "$file")" <<KC
apiVersion: v1
kind: Config
clusters:
- name: decor-scale
  cluster: {certificate-authority: $SCALE_PKI/ca.crt, server: $server}
users:
- name: $cn
  user: {client-certificate: $SCALE_PKI/scale-$file.crt, client-key: $SCALE_PKI/scale-$file.key}
contexts:
- name: decor-scale
  context: {cluster: decor-scale, user: $cn}
current-context: decor-scale
KC
  chmod 600 "$(scale_kubeconfig "$file")"
done <<<"${SCALE_USERS// /$'\n'}"

api() { # api METHOD PATH [CONTENT-TYPE DATA-FILE]: the admin's request to the scale apiserver
  local args=(-fsS --cacert "$SCALE_PKI/ca.crt" --cert "$SCALE_PKI/scale-admin.crt" --key "$SCALE_PKI/scale-admin.key" -X "$1")
  [ $# -ge 4 ] && args+=(-H "Content-Type: $3" --data-binary "@$4")
  curl "${args[@]}" "$server$2"
}

# --- etcd and the API server -------------------------------------------------------------------
start_daemon etcd "$SCALE_K8S_BIN/etcd" --name decor-scale --data-dir "$SCALE_ETCD_DATA" \
  --listen-client-urls "http://127.0.0.1:$SCALE_ETCD_CLIENT_PORT" \
  --advertise-client-urls "http://127.0.0.1:$SCALE_ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$SCALE_ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$SCALE_ETCD_PEER_PORT" \
  --initial-cluster "decor-scale=http://127.0.0.1:$SCALE_ETCD_PEER_PORT" \
  --listen-metrics-urls "http://127.0.0.1:$SCALE_ETCD_METRICS_PORT" \
  --quota-backend-bytes 4294967296 --log-level warn --unsafe-no-fsync
wait_for "etcd health" "$SCALE_START_TIMEOUT_S" curl -fsS "http://127.0.0.1:$SCALE_ETCD_METRICS_PORT/health" || { dump_log etcd; die "etcd not healthy"; }

# The operator replicas' requests at Metadata level, each logged once when it completes: the
# benchmark counts them by replica, verb and resource from this log (other clients are not
# logged; the API server's apiserver_request_total counts everyone). DECOR_SCALE_AUDIT_ALL=1
# logs all.
audit_users="  users: [$SCALE_OPERATOR_USERS]"
[ "${DECOR_SCALE_AUDIT_ALL:-0}" = 1 ] && audit_users=""
cat > "$SCALE_CONFIG/audit-policy.yaml" <<EOF2
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
$audit_users
- level: None
EOF2
# No kube-controller-manager runs here (no garbage collector, no token controller, no node
# lifecycle controller), so two admission plugins that wait on it are off: ServiceAccount
# (nothing on a fake node needs a token) and TaintNodesByCondition (its not-ready taint on a
# new node would never be lifted; kwok's heartbeats keep the nodes Ready).
start_daemon kube-apiserver "$SCALE_K8S_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$SCALE_ETCD_CLIENT_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$SCALE_APISERVER_PORT" \
  --service-cluster-ip-range 10.97.0.0/16 \
  --client-ca-file "$SCALE_PKI/ca.crt" \
  --tls-cert-file "$SCALE_PKI/apiserver.crt" --tls-private-key-file "$SCALE_PKI/apiserver.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$SCALE_PKI/sa.pub" --service-account-signing-key-file "$SCALE_PKI/sa.key" \
  --authorization-mode RBAC --disable-admission-plugins ServiceAccount,TaintNodesByCondition \
  --audit-policy-file "$SCALE_CONFIG/audit-policy.yaml" --audit-log-path "$SCALE_AUDIT_LOG" \
  --audit-log-format json --audit-log-mode batch --audit-log-maxsize 0 \
  --allow-privileged=true --profiling=false --v=1
wait_for "kube-apiserver /readyz" "$SCALE_START_TIMEOUT_S" api GET /readyz || { dump_log kube-apiserver; die "kube-apiserver not ready"; }

# --- scheduler and kwok ----------------------------------------------------------------------
start_daemon kube-scheduler "$SCALE_K8S_BIN/kube-scheduler" \
  --kubeconfig "$(scale_kubeconfig scheduler)" \
  --authentication-kubeconfig "$(scale_kubeconfig scheduler)" \
  --authorization-kubeconfig "$(scale_kubeconfig scheduler)" \
  --bind-address 127.0.0.1 --secure-port "$SCALE_SCHEDULER_PORT" --leader-elect=false --v=1
start_daemon kwok "$KWOK_BIN/kwok" --kubeconfig "$(scale_kubeconfig kwok)" --config "$KWOK_BIN/stages.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --server-address "127.0.0.1:$SCALE_KWOK_PORT" --node-lease-duration-seconds 40 --cidr 10.98.0.1/16

node_json() { # node_json NAME GPUS
  cat <<EOF2
{"apiVersion": "v1", "kind": "Node",
 "metadata": {"name": "$1", "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
              "labels": {"type": "kwok", "kubernetes.io/hostname": "$1", "kubernetes.io/os": "linux",
                         "kubernetes.io/arch": "amd64", "decor.dev/simulated": "true"}},
 "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
 "status": {"allocatable": {"cpu": "$SCALE_NODE_CPU_CORES", "memory": "$SCALE_NODE_MEMORY", "pods": "$SCALE_NODE_MAX_PODS", "nvidia.com/gpu": "$2"},
            "capacity": {"cpu": "$SCALE_NODE_CPU_CORES", "memory": "$SCALE_NODE_MEMORY", "pods": "$SCALE_NODE_MAX_PODS", "nvidia.com/gpu": "$2"}}}
EOF2
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
total=$((SCALE_CPU_NODES + SCALE_GPU_NODES))
for i in $(seq 0 $((total - 1))); do
  name=$(printf 'kwok-node-%03d' "$i"); gpus=0
  [ "$i" -ge "$SCALE_CPU_NODES" ] && gpus=$SCALE_NODE_GPUS
  api GET "/api/v1/nodes/$name" >/dev/null 2>&1 && continue
  node_json "$name" "$gpus" > "$tmp/node.json"
  api POST /api/v1/nodes application/json "$tmp/node.json" >/dev/null
done
log "$total kwok nodes ($SCALE_CPU_NODES CPU, $SCALE_GPU_NODES with $SCALE_NODE_GPUS GPUs; $SCALE_NODE_CPU_CORES cores each)"
api GET "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/deadlinetrainingjobs.decor.dev" >/dev/null 2>&1 ||
  api POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions application/yaml "$repo/crds/deadlinetrainingjobs.yaml" >/dev/null
nodes_ready() { [ "$(api GET /api/v1/nodes | grep -c '"type": "Ready"')" -ge "$total" ]; }
wait_for "kwok nodes Ready" "$SCALE_START_TIMEOUT_S" nodes_ready || { dump_log kwok; die "kwok did not make its nodes Ready"; }

# --- the SIMULATED trainer fleet and the real Prometheus scraping it ----------------------------
start_daemon simulator env PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m bench.scale.simulator --kubeconfig "$(scale_kubeconfig simulator)" \
  --port "$SCALE_SIMULATOR_PORT" --profiles "$repo/docs/benchmarks/results.json"
cat > "$SCALE_CONFIG/prometheus.yml" <<EOF2
global:
  scrape_interval: ${SCALE_SCRAPE_INTERVAL_S}s
  scrape_timeout: ${SCALE_SCRAPE_INTERVAL_S}s
scrape_configs:
  - job_name: decor-trainers-simulated
    honor_labels: true   # the simulator's namespace/pod labels name the trainer pods
    static_configs:
      - targets: ["127.0.0.1:$SCALE_SIMULATOR_PORT"]
EOF2
start_daemon prometheus "$(command -v prometheus)" --config.file="$SCALE_CONFIG/prometheus.yml" \
  --storage.tsdb.path="$SCALE_PROM_DATA" --web.listen-address="127.0.0.1:$SCALE_PROMETHEUS_PORT"
wait_for "Prometheus ready" "$SCALE_START_TIMEOUT_S" curl -fsS "http://127.0.0.1:$SCALE_PROMETHEUS_PORT/-/ready" || { dump_log prometheus; die "Prometheus not ready"; }
wait_for "simulator /metrics" "$SCALE_START_TIMEOUT_S" curl -fsS "http://127.0.0.1:$SCALE_SIMULATOR_PORT/metrics" || { dump_log simulator; die "simulator did not start"; }
log "scale bed up: apiserver $server, Prometheus http://127.0.0.1:$SCALE_PROMETHEUS_PORT, logs $SCALE_LOGS"
echo "$SCALE_KUBECONFIG"
