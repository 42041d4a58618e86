#!/usr/bin/env bash
# Build (or reuse) kube-state-metrics from the Go module proxy at a pinned version into
# $DECOR_CACHE/kube-state-metrics-$KSM_VERSION/bin (outside the repo, keyed by version). The
# e2e test of the Grafana dashboard runs it with the chart's custom-resource-state config
# (helm/decor/files/kube-state-metrics-decor.yaml) to produce the decor_job_* series.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=build-ksm
. "$here/lib.sh"
go_build_cached "$KSM_BIN" k8s.io/kube-state-metrics/v2 "$KSM_VERSION" k8s.io/kube-state-metrics/v2
