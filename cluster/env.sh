# Source me: `. cluster/env.sh` — KUBECONFIG for the test bed and kubectl 1.35 / helm 4 on PATH.
# shellcheck shell=bash
_decor_cluster_dir=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
# shellcheck source=cluster/lib.sh
. "$_decor_cluster_dir/lib.sh"
export KUBECONFIG=$KUBECONFIG_ADMIN
case ":$PATH:" in *":$TOOLS_BIN:"*) ;; *) export PATH=$TOOLS_BIN:$PATH ;; esac
unset _decor_cluster_dir
