#!/usr/bin/env bash
# Tear the test bed down: stop every process it started (pods, shims, daemons), unmount what
# lies under the kubelet/containerd directories, delete the interfaces, iptables chains and
# cgroups it made, and wipe the cluster's data (etcd, kubelet). Kept: the certificates, the
# containerd image store (so a later cluster-up is fast), the registry's images and the logs.
# Safe to run twice.
# `cluster-down.sh --purge` also removes the image store and the whole state dir.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=cluster-down
. "$here/lib.sh"
need_root
purge=0; [ "${1:-}" = --purge ] && purge=1

pid_of() { local f=$CLUSTER_RUN/$1.pid; [ -f "$f" ] && [ -d "/proc/$(cat "$f")" ] && cat "$f"; }
stop_daemons() { # stop_daemons TIMEOUT NAME...: SIGTERM to all, SIGKILL to those left after TIMEOUT s
  local timeout=$1; shift
  local name pid pids=() names=()
  for name in "$@"; do
    if pid=$(pid_of "$name"); then pids+=("$pid"); names+=("$name"); kill -TERM "$pid" 2>/dev/null || true; fi
    rm -f "$CLUSTER_RUN/$name.pid"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  log "stopping ${names[*]}"
  local end=$((SECONDS + timeout)) alive
  while :; do
    alive=0
    for pid in "${pids[@]}"; do [ -d "/proc/$pid" ] && alive=1; done
    [ $alive = 0 ] && return 0
    [ $SECONDS -ge $end ] && break
    sleep 0.2
  done
  for pid in "${pids[@]}"; do
    [ -d "/proc/$pid" ] && { log "pid $pid did not exit in ${timeout}s; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  done
  sleep 0.5
}
# PIDs whose command line names our containerd socket (the runc shims it spawned)
our_shims() {
  local p
  for p in /proc/[0-9]*; do
    [ -r "$p/cmdline" ] || continue
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "containerd-shim.* -address $CONTAINERD_SOCK" && echo "${p#/proc/}"
  done
  return 0
}
ctr_k8s() { /usr/bin/ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }

# 1. Let the kubelet stop pods the proper way (CNI teardown) while the API is there.
if [ -n "$(pid_of kubelet || true)" ] && [ -n "$(pid_of kube-apiserver || true)" ] && [ -x "$TOOLS_BIN/kubectl" ]; then
  kc() { timeout 60 "$TOOLS_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
  stop_daemons 10 kube-controller-manager kube-scheduler   # nothing re-creates or re-binds pods
  if kc get pods -A --no-headers 2>/dev/null | grep -q .; then
    log "deleting all pods (the kubelet stops them)"
    kc delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
    end=$((SECONDS + 10))
    while [ $SECONDS -lt $end ] && kc get pods -A --no-headers 2>/dev/null | grep -q .; do sleep 0.5; done
    # pods already terminating with a long grace period do not shorten it: force those
    kc delete pods --all --all-namespaces --force --grace-period=0 >/dev/null 2>&1 || true
    end=$((SECONDS + 3))    # sandboxes (CNI teardown) follow shortly; the rest is killed below
    while [ $SECONDS -lt $end ] && [ -n "$(ctr_k8s tasks ls -q 2>/dev/null)" ]; do sleep 0.5; done
  fi
fi

# 2. Daemons, kubelet first so nothing restarts containers. The API server drains watches
#    for long on SIGTERM; the cluster's data is wiped anyway, so it gets 5 s.
stop_daemons 30 kubelet
stop_daemons 5 kube-proxy kube-scheduler kube-controller-manager kube-apiserver
stop_daemons 10 etcd
bash "$here/registry.sh" down  # its images stay (--purge deletes them)

# 3. Whatever containers are left: kill them through containerd, then the shims.
if [ -n "$(pid_of containerd || true)" ]; then
  for t in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
  end=$((SECONDS + 15))
  while [ -n "$(ctr_k8s tasks ls -q 2>/dev/null)" ] && [ $SECONDS -lt $end ]; do
    for t in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks delete -f "$t" >/dev/null 2>&1 || true; done
    sleep 0.5
  done
  for c in $(ctr_k8s containers ls -q 2>/dev/null); do ctr_k8s containers delete "$c" >/dev/null 2>&1 || true; done
fi
stop_daemons 10 containerd
for pid in $(our_shims); do
  log "killing leftover shim $pid"
  # the shim's container processes live in its cgroup; kill them with it
  kill -KILL "$pid" 2>/dev/null || true
done

# 4. Processes still in the kubepods cgroups (e.g. a container whose shim died).
for hier in /sys/fs/cgroup/*/; do
  [ -d "${hier}kubepods" ] || continue
  while read -r f; do
    while read -r pid; do [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true; done < "$f"
  done < <(find "${hier}kubepods" -name cgroup.procs 2>/dev/null)
done
[ -d /sys/fs/cgroup/unified/kubepods ] || true
sleep 0.5

# 5. Mounts under our directories (deepest first).
for dir in "$KUBELET_DIR" "$CONTAINERD_ROOT" "$CONTAINERD_STATE" "$CLUSTER_RUN" "$CLUSTER_STATE"; do
  awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
done

# 6. Network: pod veths (their peers die with the pod netns), the bridge, iptables.
for v in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
  ip link delete "$v" 2>/dev/null || true
done
ip link show "$BRIDGE" >/dev/null 2>&1 && { log "deleting bridge $BRIDGE"; ip link delete "$BRIDGE"; }
if [ -x "$K8S_BIN/kube-proxy" ]; then "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
while iptables -w -D FORWARD -j DECOR-FORWARD 2>/dev/null; do :; done
iptables -w -F DECOR-FORWARD 2>/dev/null || true
iptables -w -X DECOR-FORWARD 2>/dev/null || true
while iptables -w -t nat -D OUTPUT -j DECOR-TEST-DNAT 2>/dev/null; do :; done
iptables -w -t nat -F DECOR-TEST-DNAT 2>/dev/null || true
iptables -w -t nat -X DECOR-TEST-DNAT 2>/dev/null || true
# chains the kubelet made (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...)
for table in filter nat mangle; do
  for chain in $(iptables -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
    iptables -w -t "$table" -S 2>/dev/null | awk -v c="$chain" '$1 == "-A" && $0 ~ ("-j " c "( |$)") {sub(/^-A/, "-D"); print}' |
      while read -r rule; do eval iptables -w -t "$table" "$rule" 2>/dev/null || true; done
  done
  for chain in $(iptables -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
    iptables -w -t "$table" -F "$chain" 2>/dev/null || true
  done
  for chain in $(iptables -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
    iptables -w -t "$table" -X "$chain" 2>/dev/null || true
  done
done
if [ -f "$CLUSTER_STATE/ip_forward.orig" ]; then
  sysctl -qw net.ipv4.ip_forward="$(cat "$CLUSTER_STATE/ip_forward.orig")"
  rm -f "$CLUSTER_STATE/ip_forward.orig"
fi

# 7. cgroups the kubelet and runc made (every v1 hierarchy, and the unified one).
for hier in /sys/fs/cgroup/*/; do
  for top in kubepods kubepods.slice; do
    [ -d "$hier$top" ] || continue
    find "$hier$top" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [ -d "$hier$top" ] && log "could not remove cgroup $hier$top"
  done
done

# 8. Data. Certificates, the image store and the logs stay (see --purge).
rm -rf "$ETCD_DATA" "$KUBELET_DIR" "$CLUSTER_STATE/cni/ipam" "$CLUSTER_STATE/pod-logs" "$CLUSTER_RUN"
find /var/log/containers -maxdepth 1 -type l -lname "$CLUSTER_STATE/*" -delete 2>/dev/null || true
if [ "$purge" = 1 ]; then
  log "purging $CLUSTER_STATE (images, certificates, logs)"
  rm -rf "$CLUSTER_STATE"
fi

# 9. Check that nothing is left behind.
left=0
[ -n "$(our_shims)" ] && { log "leftover shim processes: $(our_shims | tr '\n' ' ')"; left=1; }
# Ours: the binary from $K8S_BIN and $CLUSTER_STATE on the command line (the scale bed runs the
# same binaries with state of its own, and may be up beside this bed).
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet; do
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$K8S_BIN/$b" ] || continue
    tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qF "$CLUSTER_STATE" || continue
    log "leftover $b process ${p#/proc/}"; left=1
  done
done
awk -v d="$CLUSTER_STATE" -v r="$CLUSTER_RUN" 'index($2, d) == 1 || index($2, r) == 1 {print "leftover mount " $2; bad=1} END {exit bad}' /proc/self/mounts >&2 || left=1
ip link show "$BRIDGE" >/dev/null 2>&1 && { log "leftover interface $BRIDGE"; left=1; }
for hier in /sys/fs/cgroup/*/; do [ -d "${hier}kubepods" ] && { log "leftover cgroup ${hier}kubepods"; left=1; }; done
[ $left = 0 ] || die "cluster-down left the above behind"
log "cluster down (logs kept in $LOGS)"
