#!/usr/bin/env bash
# CI entry for the e2e layer (called by .ci/run):
#   bash cluster/ci.sh [COMMAND ARGS...]
# Brings the test bed up (building Kubernetes on a fresh machine, or reusing the cache),
# builds/imports the images, then runs COMMAND with KUBECONFIG exported and kubectl/helm on
# PATH, and tears the cluster down afterwards (DECOR_KEEP_CLUSTER=1 keeps it). Exit status:
# COMMAND's, or non-zero when the cluster or the images could not be made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LOG_TAG=ci
. "$here/lib.sh"
need_root
t0=$SECONDS
log "bringing the test bed up (cold: builds Kubernetes and etcd, see docs/cluster.md)"
if ! bash "$here/cluster-up.sh" >/dev/null; then
  log "cluster-up failed; last kubelet/apiserver log lines:"
  tail -n 30 "$LOGS/kubelet.log" "$LOGS/kube-apiserver.log" 2>/dev/null >&2 || true
  exit 1
fi
t1=$SECONDS
bash "$here/build-images.sh"
t2=$SECONDS
# shellcheck source=cluster/env.sh
. "$here/env.sh"
log "timings: cluster-up $((t1 - t0))s, images $((t2 - t1))s"
log "KUBECONFIG=$KUBECONFIG"
[ $# -gt 0 ] || exit 0
rc=0
"$@" || rc=$?
if [ "${DECOR_KEEP_CLUSTER:-0}" != 1 ]; then
  bash "$here/cluster-down.sh" || log "cluster-down reported leftovers (see above)"
fi
log "total $((SECONDS - t0))s, command exit status $rc"
exit $rc
