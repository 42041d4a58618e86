#!/usr/bin/env bash
# Run the e2e suite (tests/e2e) against a cluster:
#   KUBECONFIG already set -> that cluster
#   CLUSTER=kind           -> the kind cluster of `make kind-up` (cluster/kind-env.sh)
#   otherwise              -> the local test bed of `make cluster-up` (cluster/env.sh)
# Extra arguments go to pytest (both phases), e.g. -k NAME, -x, -q.
#
# Two phases (docs/cluster.md, "Concurrent e2e tests"):
#   1. `lanes`: the tests not marked `alone`, DECOR_E2E_LANES at once (default: 4 on a machine
#      whose test ResNet steps within FOUR_LANES_MAX_STEP_S at one thread, else 3;
#      pytest-xdist), each in its own namespace with its own operator; each test sizes its jobs
#      to a lane's share of the node (tests/e2e/test_operator.py: CPU_MAX, LANE_SCALE). A
#      lane about to start its next test takes the longest waiting, one busy with a long test
#      the shortest, by tests/e2e/lane_seconds.tsv (tests/support/lane_order.py);
#      DECOR_E2E_RECORD_LANE_SECONDS=1 writes this run's seconds into it;
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
lanes=${DECOR_E2E_LANES:-}
phases=${DECOR_E2E_PHASES:-lanes alone}
for p in $phases; do
  case $p in lanes | alone) ;; *) echo "e2e: DECOR_E2E_PHASES: no phase '$p' (lanes, alone)" >&2; exit 2 ;; esac
done
[ -z "$lanes" ] || case $lanes in *[!0-9]* | 0) echo "e2e: DECOR_E2E_LANES must be a positive integer, not '$lanes'" >&2; exit 2 ;; esac

# The test jobs' ResNet width is measured once, on a quiet machine, before any test runs:
# measured inside a lane it would be skewed by the other lanes' jobs.
if [ -z "${DECOR_E2E_RESNET_WIDTH:-}" ]; then
  DECOR_E2E_RESNET_WIDTH=$("$V/bin/python" -c 'import sys; sys.path.insert(0, "tests/e2e")
from test_operator import resnet_measure; print(resnet_measure())' | tail -n 1)
  export DECOR_E2E_RESNET_WIDTH
fi
if [ "${1:-}" = --measure-width ]; then echo "$DECOR_E2E_RESNET_WIDTH"; exit 0; fi
# Four lanes where the machine is fast: their trainers hold the same 1.2 cores as three lanes,
# but every lane adds an operator, a test and their pods' start-ups. On an AMD EPYC VM whose
# ResNet stepped at 0.10-0.12 s, three lanes kept 1.19 cores busy and four passed (849 s
# against 1,152 s); on a VM that stepped at 0.14-0.175 s, four lanes beside the side runs of
# .ci/run left the node 0-3 % idle for minutes and a job ended 30.9 % late (docs/cluster.md).
FOUR_LANES_MAX_STEP_S=0.13
if [ -z "$lanes" ]; then
  lanes=3
  step=""
  case $DECOR_E2E_RESNET_WIDTH in *:*) step=${DECOR_E2E_RESNET_WIDTH#*:} ;; esac  # a bare width: none
  if [ -n "$step" ] && awk -v s="$step" -v m="$FOUR_LANES_MAX_STEP_S" 'BEGIN { exit !(s <= m) }'; then
    lanes=4
  fi
  echo "[e2e] $lanes lanes (the test ResNet's step at one thread: ${step:-not measured}${step:+ s}; four at most $FOUR_LANES_MAX_STEP_S s)" >&2
fi

empty=0
# Every finished job's deadline deviation (tests/e2e/test_operator.py: report), passed or not:
# the margins left under the bound of the tests that check it (5 %; the others, such as a GPU
# job on the bed's advertised GPUs, report theirs too).
DECOR_E2E_OUTCOMES=$(mktemp)
# Each test's start and end, by lane (tests/e2e/conftest.py): how long each lane worked, and
# how long the phase ran on after its first lane had no test left.
DECOR_E2E_TIMELINE=$(mktemp)
export DECOR_E2E_OUTCOMES DECOR_E2E_TIMELINE
trap 'rm -f "$DECOR_E2E_OUTCOMES" "$DECOR_E2E_TIMELINE"' EXIT
# lanes_summary NAME: from the timeline, each lane's tests, seconds in tests and end (from
# the phase's first test), and the phase's tail: how long its last lane ran after its first
# had no test left.
lanes_summary() {
  [ -s "$DECOR_E2E_TIMELINE" ] || return 0
  awk -v name="$1" '
    { t = $2 + 0; if (t0 == "" || t < t0) t0 = t }
    $1 == "start" { began[$3 SUBSEP $4] = t }
    $1 == "finish" && ($3 SUBSEP $4) in began {
      busy[$3] += t - began[$3 SUBSEP $4]; tests[$3]++; if (t > end[$3]) end[$3] = t }
    END {
      first = ""; last = ""
      for (l in end) {
        printf "[e2e] phase %s: lane %s ran %d tests, %.0f s in tests, done at +%.0f s\n", \
          name, l, tests[l], busy[l], end[l] - t0
        if (first == "" || end[l] < first) first = end[l]
        if (last == "" || end[l] > last) last = end[l]
      }
      if (length(end) > 1) printf "[e2e] phase %s: tail %.0f s (the last lane was done that long after the first)\n", \
        name, last - first
    }' "$DECOR_E2E_TIMELINE" | sort
}
# phase NAME PYTEST-ARGS...: one pytest run. A phase that selects no test (exit status 5) is
# not a failure by itself; every phase run selecting none is (below).
phase() {
  local name=$1 rc=0 t0=$SECONDS
  shift
  printf '\n[e2e] phase %s: pytest %s\n' "$name" "$*" >&2
  : >"$DECOR_E2E_OUTCOMES"
  : >"$DECOR_E2E_TIMELINE"
  "$V/bin/pytest" tests/e2e "$@" || rc=$?
  printf '[e2e] phase %s: exit status %s in %ss\n' "$name" "$rc" "$((SECONDS - t0))" >&2
  lanes_summary "$name" >&2
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
  DECOR_E2E_LANES=1 DECOR_E2E_RECORD_LANE_SECONDS= phase alone -m "e2e and alone" --durations=25 "$@" || rc2=$?
fi
if [ "$empty" = "$ran" ]; then
  echo "[e2e] FAILED: no test selected in the phases run ($phases)" >&2
  exit 5
fi
if [ "$rc1" != 0 ] || [ "$rc2" != 0 ]; then
  echo "[e2e] FAILED: concurrent phase $rc1, alone phase $rc2" >&2
  exit 1
fi
