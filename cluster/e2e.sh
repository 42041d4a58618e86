#!/usr/bin/env bash
# Run the e2e suite (tests/e2e) against a cluster:
#   KUBECONFIG already set -> that cluster
#   CLUSTER=kind           -> the kind cluster of `make kind-up` (cluster/kind-env.sh)
#   otherwise              -> the local test bed of `make cluster-up` (cluster/env.sh)
# Extra arguments go to pytest.
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
exec "$V/bin/pytest" tests/e2e -m e2e "$@"
