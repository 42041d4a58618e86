#!/usr/bin/env bash
# Run the e2e suite (tests/e2e) against a cluster:
#   KUBECONFIG already set -> that cluster
#   CLUSTER=kind           -> the kind cluster of `make kind-up` (cluster/kind-env.sh)
#   otherwise              -> the local test bed of `make cluster-up` (cluster/env.sh)
# Extra arguments go to pytest (both phases), e.g. -k NAME, -x, -q.
#
# Two phases (docs/cluster.md, "Concurrent e2e tests"):
#   1. `lanes`: the tests not marked `alone`, DECOR_E2E_LANES at once (default 3;
#      pytest-xdist), each in its own namespace with its own operator; each test sizes its jobs
#      to a lane's share of the node (tests/e2e/test_operator.py: CPU_MAX, LANE_SCALE);
#   2. `alone`: the tests marked `alone` (they need the whole node, restart the API server or
#      change the node), one at a time.
# DECOR_E2E_LANES=1 runs phase 1 one test at a time too. DECOR_E2E_PHASES picks the phases
# (default "lanes alone"; .ci/run runs them one by one, with the scale smoke run beside the
# lanes). The 25 slowest tests of each phase are printed at its end, and every job's
# deadline deviation, widest first. The exit status is non-zero when a phase failed.
# `e2e.sh --measure-width` prints the test ResNet's width and its step time on this machine
# (DECOR_E2E_RESNET_WIDTH, WIDTH:STEP_S) and exits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if [ "${CLUSTER:-}" = kind ]; then
  # shellcheck source=cluster/kind-env.sh
  . "$here/kind-env.sh"
elif [ -z "${KUBECONFIG:-}" ]; then
  # shellcheck source=cluster/env.sh
  . "$here/env.sh"
  [ -f "$KUBECONFIG" ] || { echo "e2e: no test bed kubeconfig at $KUBECONFIG: run 'make cluster-up' first" >&2; exit 1; }
fi
V=$(bash "$root/hack/venv.sh")
cd "$root"
lanes=${DECOR_E2E_LANES:-3}
phases=${DECOR_E2E_PHASES:-lanes alone}
for p in $phases; do
  case $p in lanes | alone) ;; *) echo "e2e: DECOR_E2E_PHASES: no phase '$p' (lanes, alone)" >&2; exit 2 ;; esac
done
case $lanes in '' | *[!0-9]* | 0) echo "e2e: DECOR_E2E_LANES must be a positive integer, not '$lanes'" >&2; exit 2 ;; esac

# The test jobs' ResNet width is measured once, on a quiet machine, before any test runs:
# measured inside a lane it would be skewed by the other lanes' jobs.
if [ -z "${DECOR_E2E_RESNET_WIDTH:-}" ]; then
  DECOR_E2E_RESNET_WIDTH=$("$V/bin/python" -c 'import sys; sys.path.insert(0, "tests/e2e")
from test_operator import resnet_measure; print(resnet_measure())' | tail -n 1)
  export DECOR_E2E_RESNET_WIDTH
fi
if [ "${1:-}" = --measure-width ]; then echo "$DECOR_E2E_RESNET_WIDTH"; exit 0; fi

empty=0
# Every finished job's deadline deviation (tests/e2e/test_operator.py: report), passed or not:
# the margins left under the bound of the tests that check it (5 %; the others, such as a GPU
# job on the bed's advertised GPUs, report theirs too).
DECOR_E2E_OUTCOMES=$(mktemp)
export DECOR_E2E_OUTCOMES
trap 'rm -f "$DECOR_E2E_OUTCOMES"' EXIT
# phase NAME PYTEST-ARGS...: one pytest run. A phase that selects no test (exit status 5) is
# not a failure by itself; every phase run selecting none is (below).
phase() {
  local name=$1 rc=0 t0=$SECONDS
  shift
  printf '\n[e2e] phase %s: pytest %s\n' "$name" "$*" >&2
  : >"$DECOR_E2E_OUTCOMES"
  "$V/bin/pytest" tests/e2e "$@" || rc=$?
  printf '[e2e] phase %s: exit status %s in %ss\n' "$name" "$rc" "$((SECONDS - t0))" >&2
  if [ -s "$DECOR_E2E_OUTCOMES" ]; then
    printf '[e2e] phase %s: deviation from the deadline (%%) of each job, widest first\n' "$name" >&2
    awk '{ print ($1 < 0 ? -$1 : $1 + 0) "\t" $0 }' "$DECOR_E2E_OUTCOMES" | sort -rn | cut -f2- >&2
  fi
  if [ "$rc" = 5 ]; then empty=$((empty + 1)); rc=0; fi
  return "$rc"
}
rc1=0 rc2=0 ran=0
if [[ " $phases " == *" lanes "* ]]; then
  ran=$((ran + 1))
  if [ "$lanes" -gt 1 ]; then
    DECOR_E2E_LANES=$lanes phase "concurrent ($lanes lanes)" -m "e2e and not alone" \
      -n "$lanes" --dist loadgroup --durations=25 "$@" || rc1=$?
  else
    DECOR_E2E_LANES=1 phase "concurrent (1 lane)" -m "e2e and not alone" --durations=25 "$@" || rc1=$?
  fi
fi
if [[ " $phases " == *" alone "* ]]; then
  ran=$((ran + 1))
  DECOR_E2E_LANES=1 phase alone -m "e2e and alone" --durations=25 "$@" || rc2=$?
fi
if [ "$empty" = "$ran" ]; then
  echo "[e2e] FAILED: no test selected in the phases run ($phases)" >&2
  exit 5
fi
if [ "$rc1" != 0 ] || [ "$rc2" != 0 ]; then
  echo "[e2e] FAILED: concurrent phase $rc1, alone phase $rc2" >&2
  exit 1
fi
