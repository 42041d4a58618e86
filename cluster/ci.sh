#!/usr/bin/env bash
# CI entry for the e2e layer. Two ways to use it:
#   source cluster/ci.sh            # .ci/run: cluster up + images, KUBECONFIG and PATH exported
#                                   # into the calling shell (which then runs `make e2e` and
#                                   # `make cluster-down`)
#   bash cluster/ci.sh CMD ARGS...  # the same, then CMD with that environment, then
#                                   # cluster-down (DECOR_KEEP_CLUSTER=1 keeps it); exits with
#                                   # CMD's status
# On a fresh machine this builds Kubernetes + etcd (~13 min) and the images (~7 min); with
# /var/cache/decor kept it takes about a minute. A failure to bring the cluster up or to
# build the images ends the caller with a non-zero status.
# shellcheck shell=bash
_decor_ci_sourced=0
[ "${BASH_SOURCE[0]}" != "$0" ] && _decor_ci_sourced=1
[ "$_decor_ci_sourced" = 1 ] || set -euo pipefail
_decor_ci_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_decor_ci_up() {
  local here=$_decor_ci_here t0=$SECONDS t1 t2
  # shellcheck disable=SC2034  # read by log() in lib.sh
  local LOG_TAG=ci
  # shellcheck source=cluster/lib.sh
  . "$here/lib.sh"
  need_root
  log "bringing the test bed up (cold: builds Kubernetes and etcd, see docs/cluster.md)"
  if ! bash "$here/cluster-up.sh" >/dev/null; then
    log "cluster-up failed; last kubelet/apiserver log lines:"
    tail -n 30 "$LOGS/kubelet.log" "$LOGS/kube-apiserver.log" 2>/dev/null >&2 || true
    return 1
  fi
  t1=$SECONDS
  bash "$here/build-images.sh" || { log "image build failed"; return 1; }
  t2=$SECONDS
  log "timings: cluster-up $((t1 - t0))s, images $((t2 - t1))s"
}

if ! _decor_ci_up; then
  echo "[ci] the e2e test bed could not be brought up" >&2
  exit 1
fi
# shellcheck source=cluster/env.sh
. "$_decor_ci_here/env.sh"
echo "[ci] KUBECONFIG=$KUBECONFIG" >&2

if [ "$_decor_ci_sourced" = 1 ]; then
  unset _decor_ci_sourced
  return 0
fi
[ $# -gt 0 ] || exit 0
rc=0
"$@" || rc=$?
if [ "${DECOR_KEEP_CLUSTER:-0}" != 1 ]; then
  bash "$_decor_ci_here/cluster-down.sh" || echo "[ci] cluster-down reported leftovers (see above)" >&2
fi
echo "[ci] command exit status $rc" >&2
exit $rc
