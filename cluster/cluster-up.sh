#!/usr/bin/env bash
# Bring up DECOR's single-node Kubernetes test bed on this machine (no Docker needed):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet and
# Debian's containerd + runc + CNI bridge, and an image registry on 127.0.0.1:5000 that containerd
# pulls from (cluster/registry.sh). Idempotent: when the node is already Ready it only
# re-checks the GPU capacity and that the registry runs. See docs/cluster.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=cluster-up
. "$here/lib.sh"
need_root
t_start=$SECONDS

# ------------------------------------------------------------------------------ processes
pidfile() { echo "$CLUSTER_RUN/$1.pid"; }
running() { # running NAME: our daemon NAME is alive
  local f; f=$(pidfile "$1")
  [ -f "$f" ] || return 1
  local pid; pid=$(cat "$f")
  [ -d "/proc/$pid" ] && grep -qa -- "$2" "/proc/$pid/cmdline" 2>/dev/null
}
start_daemon() { # start_daemon NAME BINARY ARGS...: detached, logs in $LOGS/NAME.log
  local name=$1; shift
  if running "$name" "$1"; then log "$name already running (pid $(cat "$(pidfile "$name")"))"; return 0; fi
  log "starting $name"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! > "$(pidfile "$name")"
}
dump_log() { log "last lines of $LOGS/$1.log:"; tail -n 40 "$LOGS/$1.log" >&2 || true; }
require_alive() { running "$1" "$2" || { dump_log "$1"; die "$1 exited; see $LOGS/$1.log"; }; }

kc() { "$TOOLS_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

write_kubeconfig() { # write_kubeconfig FILE CERTNAME USER
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: decor
  cluster:
    certificate-authority: $PKI/ca.crt
    server: https://$POD_GW:$APISERVER_PORT
users:
- name: $3
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: decor
  context: {cluster: decor, user: $3}
current-context: decor
EOF
  chmod 600 "$1"
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

gpu_capacity_ok() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}' 2>/dev/null)" = "$GPU_CAPACITY" ]
}

patch_gpu_capacity() {
  # Extended resource: PATCH the node's status (capacity; the kubelet copies it to allocatable).
  local _
  for _ in $(seq 1 60); do
    kc patch node "$NODE_NAME" --subresource=status --type=json -p \
      "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$GPU_CAPACITY\"}]" >/dev/null 2>&1 || true
    gpu_capacity_ok && { log "node $NODE_NAME advertises nvidia.com/gpu: $GPU_CAPACITY"; return 0; }
    sleep 1
  done
  die "node $NODE_NAME does not show nvidia.com/gpu=$GPU_CAPACITY in allocatable"
}

all_running() {
  local n
  for n in etcd:etcd kube-apiserver:kube-apiserver kube-controller-manager:kube-controller-manager \
           kube-scheduler:kube-scheduler kube-proxy:kube-proxy containerd:containerd kubelet:kubelet; do
    running "${n%%:*}" "${n#*:}" || return 1
  done
}

# Fast path: already up.
if [ -x "$TOOLS_BIN/kubectl" ] && all_running && node_ready; then
  gpu_capacity_ok || patch_gpu_capacity
  bash "$here/registry.sh" up
  log "cluster already up: node $NODE_NAME Ready ($(kc get node "$NODE_NAME" -o jsonpath='{.status.nodeInfo.kubeletVersion}'))"
  log "KUBECONFIG=$KUBECONFIG_ADMIN   logs: $LOGS"
  echo "$KUBECONFIG_ADMIN"
  exit 0
fi

# ------------------------------------------------------------------------------ inputs
[ -d /sys/fs/cgroup/cpu ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || die "no cgroup hierarchy under /sys/fs/cgroup"
# The daemons start in this shell's cgroups. In .ci/run's cgroup for background builds
# (decor-ci-idle: CPU only when nothing else wants it) etcd and the API server starve as soon
# as the tests load the node, and requests time out: start them from its parent instead.
for entry in $(grep -E '^[0-9]+:(([^:]*,)?cpu(,[^:]*)?)?:' /proc/self/cgroup); do
  path=${entry#*:*:}
  [ "${path##*/}" = decor-ci-idle ] || continue
  root=/sys/fs/cgroup/cpu
  [ "${entry#*:}" != ":$path" ] || root=/sys/fs/cgroup  # cgroup v2
  log "this shell is in the background builds' cgroup $path; starting the test bed from ${path%/*}/"
  echo $$ >"$root${path%/*}/cgroup.procs" || die "cannot leave cgroup $path: start the test bed from another shell"
done
apt_ensure "${CLUSTER_PACKAGES[@]}"
"$here/build-k8s.sh"
"$here/build-ksm.sh"  # kube-state-metrics for the dashboard test (run by that test)
"$here/install-tools.sh"
"$here/pki.sh"

# A test bed whose processes were killed without cluster-down (the machine or its session
# ended mid-run) leaves its etcd data and pods behind; started on that data, the cluster
# would bring the old pods back and the node would start out partly taken. Clear it first.
if ! running etcd etcd && { [ -d "$ETCD_DATA" ] || [ -d "$KUBELET_DIR" ]; }; then
  log "found leftovers of a test bed that was not taken down; clearing them (cluster-down)"
  bash "$here/cluster-down.sh"
fi

mkdir -p "$CLUSTER_RUN" "$CLUSTER_STATE" "$KUBELET_DIR" "$CNI_CONF_DIR" "$CONTAINERD_ROOT" "$CLUSTER_STATE/config"
# keep the previous run's logs one generation back
if [ -d "$LOGS" ] && ! running etcd etcd && ! running kubelet kubelet; then
  rm -rf "$LOGS.prev"; mv "$LOGS" "$LOGS.prev"
fi
mkdir -p "$LOGS"
log "state: $CLUSTER_STATE   logs: $LOGS   binaries: $K8S_BIN"
cfg=$CLUSTER_STATE/config

# ------------------------------------------------------------------------------ kernel + network
for m in overlay br_netfilter; do modprobe "$m" 2>/dev/null || true; done
[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && sysctl -qw net.bridge.bridge-nf-call-iptables=1
# IPv4 forwarding is needed only for pod -> Service -> pod; DECOR-FORWARD below confines it
# to traffic that enters and leaves the pod bridge. The original value is restored by down.
[ -f "$CLUSTER_STATE/ip_forward.orig" ] || cat /proc/sys/net/ipv4/ip_forward > "$CLUSTER_STATE/ip_forward.orig"
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  log "creating bridge $BRIDGE ($POD_GW/${POD_CIDR#*/})"
  ip link add "$BRIDGE" type bridge
fi
ip addr show dev "$BRIDGE" | grep -q "inet $POD_GW/" || ip addr add "$POD_GW/${POD_CIDR#*/}" dev "$BRIDGE"
ip link set "$BRIDGE" up
iptables -w -N DECOR-FORWARD 2>/dev/null || true
iptables -w -F DECOR-FORWARD
iptables -w -A DECOR-FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
iptables -w -A DECOR-FORWARD -i "$BRIDGE" -j DROP     # pods never reach beyond the bridge
iptables -w -A DECOR-FORWARD -o "$BRIDGE" -j DROP
[ "$(cat "$CLUSTER_STATE/ip_forward.orig")" = 1 ] || iptables -w -A DECOR-FORWARD -j DROP  # keep the host a non-router
iptables -w -C FORWARD -j DECOR-FORWARD 2>/dev/null || iptables -w -I FORWARD 1 -j DECOR-FORWARD
sysctl -qw net.ipv4.ip_forward=1

# CNI: bridge + host-local IPAM, no default route, no masquerade: pods reach each other,
# the node (gateway) and Service IPs (DNAT to pods or to the API server on the gateway).
cat > "$CNI_CONF_DIR/10-decor.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "decor",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CLUSTER_STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GW"}]],
        "routes": [{"dst": "$SERVICE_CIDR", "gw": "$POD_GW"}]
      }
    }
  ]
}
EOF

# ------------------------------------------------------------------------------ containerd
# Registries containerd pulls from: only the test bed's own ($BED_REGISTRY, plain HTTP).
bash "$here/registry.sh" hosts "$CONTAINERD_HOSTS_DIR"
cat > "$cfg/containerd.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CLUSTER_RUN/containerd.sock.ttrpc"
[debug]
  address = "$CLUSTER_RUN/containerd-debug.sock"
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$CLUSTER_STATE/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # Root here lacks CAP_SYS_RESOURCE (a sandboxed VM), so runc cannot lower oom_score_adj
  # (the kubelet asks -998 for sandboxes): clamp to containerd's own value instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$CONTAINERD_HOSTS_DIR"
EOF
start_daemon containerd /usr/bin/containerd --config "$cfg/containerd.toml"
wait_for "containerd socket" 30 /usr/bin/ctr --address "$CONTAINERD_SOCK" version || { dump_log containerd; die "containerd did not start"; }
bash "$here/registry.sh" up

# pause image: a static C binary, built once per source hash, imported when missing
ctr_k8s() { /usr/bin/ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }
if ! ctr_k8s images ls -q | grep -qx "$PAUSE_IMAGE"; then
  key=$(sha256sum "$here/pause/pause.c" "$here/oci-pack.py" | sha256sum | cut -c1-12)
  pdir=$DECOR_CACHE/pause-$key
  if [ ! -f "$pdir/pause.oci.tar" ]; then
    log "building pause image ($pdir)"
    rm -rf "$pdir"; mkdir -p "$pdir/rootfs"
    gcc -static -O2 -s -o "$pdir/rootfs/pause" "$here/pause/pause.c"
    python3 "$here/oci-pack.py" --rootfs "$pdir/rootfs" --name "$PAUSE_IMAGE" \
      --entrypoint '["/pause"]' --out "$pdir/pause.oci.tar"
  fi
  log "importing $PAUSE_IMAGE"
  ctr_k8s images import "$pdir/pause.oci.tar" >&2
fi

# ------------------------------------------------------------------------------ etcd
start_daemon etcd "$K8S_BIN/etcd" --name decor --data-dir "$ETCD_DATA" \
  --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
  --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
  --initial-cluster decor=http://127.0.0.1:12380 --listen-metrics-urls http://127.0.0.1:12381 \
  --quota-backend-bytes 2147483648 --log-level warn --unsafe-no-fsync
wait_for "etcd health" 60 curl -fsS http://127.0.0.1:12381/health || { dump_log etcd; die "etcd not healthy"; }

# ------------------------------------------------------------------------------ apiserver
start_daemon kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers http://127.0.0.1:12379 \
  --bind-address "$POD_GW" --advertise-address "$POD_GW" --secure-port "$APISERVER_PORT" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --client-ca-file "$PKI/ca.crt" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$PKI/ca.crt" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --allow-privileged=true --profiling=false --v=1
write_kubeconfig "$KUBECONFIG_ADMIN" admin decor-admin
write_kubeconfig "$cfg/controller-manager.kubeconfig" controller-manager system:kube-controller-manager
write_kubeconfig "$cfg/scheduler.kubeconfig" scheduler system:kube-scheduler
write_kubeconfig "$cfg/kubelet.kubeconfig" kubelet "system:node:$NODE_NAME"
write_kubeconfig "$cfg/kube-proxy.kubeconfig" kube-proxy system:kube-proxy
apiserver_ready() { kc get --raw /readyz; }
wait_for "kube-apiserver /readyz" 120 apiserver_ready || { dump_log kube-apiserver; die "kube-apiserver not ready"; }
log "kube-apiserver ready ($(kc version -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'))"

# ------------------------------------------------------------------------------ controllers
start_daemon kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$cfg/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$cfg/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$cfg/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" --allocate-node-cidrs=false --v=1
start_daemon kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$cfg/scheduler.kubeconfig" \
  --authentication-kubeconfig "$cfg/scheduler.kubeconfig" \
  --authorization-kubeconfig "$cfg/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --v=1

cat > "$cfg/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $cfg/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$POD_GW/32"]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
start_daemon kube-proxy "$K8S_BIN/kube-proxy" --config "$cfg/kube-proxy.yaml" --v=1

# ------------------------------------------------------------------------------ kubelet
cat > "$cfg/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $POD_GW
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
podLogsDir: $CLUSTER_STATE/pod-logs
clusterDomain: cluster.local
resolvConf: ""        # no DNS in pods: nothing off this machine is reachable from them anyway
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
maxPods: 110
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
oomScoreAdj: 0     # no CAP_SYS_RESOURCE here: a negative value cannot be set
EOF
start_daemon kubelet "$K8S_BIN/kubelet" --config "$cfg/kubelet.yaml" \
  --kubeconfig "$cfg/kubelet.kubeconfig" --root-dir "$KUBELET_DIR" \
  --hostname-override "$NODE_NAME" --node-ip "$POD_GW" --v=2
kubelet_healthy() { curl -fsS http://127.0.0.1:10248/healthz; }
wait_for "kubelet healthz" 120 kubelet_healthy || { dump_log kubelet; die "kubelet not healthy"; }
for n in kube-controller-manager kube-scheduler kube-proxy; do require_alive "$n" "$n"; done
wait_for "node $NODE_NAME Ready" 180 node_ready || { dump_log kubelet; die "node $NODE_NAME not Ready"; }
patch_gpu_capacity
# the default ServiceAccount (pods need it) appears once the controller-manager runs
wait_for "default ServiceAccount" 60 kc -n default get serviceaccount default || die "no default ServiceAccount"
# the pods' side of the FORWARD guard must come before kube-proxy's chains
iptables -w -D FORWARD -j DECOR-FORWARD 2>/dev/null || true
iptables -w -I FORWARD 1 -j DECOR-FORWARD

log "node $NODE_NAME Ready: $(kc get node "$NODE_NAME" -o jsonpath='kubelet {.status.nodeInfo.kubeletVersion}, runtime {.status.nodeInfo.containerRuntimeVersion}, {.status.nodeInfo.kernelVersion}')"
log "cluster up in $((SECONDS - t_start))s"
log "KUBECONFIG=$KUBECONFIG_ADMIN   (source cluster/env.sh)   logs: $LOGS"
echo "$KUBECONFIG_ADMIN"
