#!/usr/bin/env bash
# Stop the scale test bed's processes (by their pid files) and delete its state (etcd data,
# Prometheus data, audit log; certificates are kept unless --purge). Never touches the main bed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=scale-down
. "$here/lib.sh"
for name in simulator prometheus kwok kube-scheduler kube-apiserver etcd; do
  f=$SCALE_RUN/$name.pid
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if [ -d "/proc/$pid" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do [ -d "/proc/$pid" ] || break; sleep 0.25; done
    [ -d "/proc/$pid" ] && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
done
rm -rf "$SCALE_ETCD_DATA" "$SCALE_PROM_DATA"
if [ "${1:-}" = --purge ]; then
  rm -rf "$SCALE_STATE" "$SCALE_RUN"
elif [ -d "$SCALE_LOGS" ]; then  # keep the last run's logs one generation back
  rm -rf "$SCALE_LOGS.prev"; mv "$SCALE_LOGS" "$SCALE_LOGS.prev"
fi
log "scale bed down"
