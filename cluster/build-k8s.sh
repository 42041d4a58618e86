#!/usr/bin/env bash
# Build (or reuse) kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and etcd from the Go module proxy, in one `go build` so the shared packages
# compile once. Output: $K8S_BIN (outside the repo, keyed by version).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=build-k8s
. "$here/lib.sh"

bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd)
have_all() { local b; for b in "${bins[@]}"; do [ -x "$K8S_BIN/$b" ] || return 1; done; [ -f "$K8S_BIN/.complete" ]; }
if have_all; then log "cached: $K8S_BIN"; exit 0; fi

command -v go >/dev/null || die "go not found on PATH (Go >= 1.25 needed)"
work=$(dirname "$K8S_BIN")/src
mkdir -p "$work"
cd "$work"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
staging_version="v0.${K8S_VERSION#v1.}"

log "k8s.io/kubernetes $K8S_VERSION (staging $staging_version), etcd $ETCD_VERSION -> $K8S_BIN"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod"
export GOPROXY=${GOPROXY:-$(go env GOPROXY)}

# The staging modules k8s.io/kubernetes replaces with ./staging/... ; pin each to v0.X.Y.
gomod_file=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$gomod_file" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the module proxy"
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod_file")
[ ${#staging[@]} -gt 10 ] || die "found only ${#staging[@]} staging modules in $gomod_file"
{
  echo "module decor.local.runtime/k8sbuild"
  echo
  echo "go 1.25.0"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $K8S_VERSION"
  echo "	go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  echo ")"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m $staging_version"; done
  echo ")"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools
GO
rm -f go.sum

date_now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
vpkg=k8s.io/component-base/version
cpkg=k8s.io/client-go/pkg/version
ld="-s -w"
for p in $vpkg $cpkg; do
  ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ld="$ld -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.gitTreeState=clean -X $p.buildDate=$date_now"
done

out=$work/out
rm -rf "$out"; mkdir -p "$out"
log "go $(go env GOVERSION): resolving modules"
t0=$SECONDS
go mod download k8s.io/kubernetes go.etcd.io/etcd/server/v3
log "go build (one invocation, $(nproc) cores; a cold build takes a long time, see docs/cluster.md)"
t1=$SECONDS
go build -trimpath -ldflags "$ld" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy \
  go.etcd.io/etcd/server/v3
# go names the etcd binary after its package path (go.etcd.io/etcd/server/v3 -> "server")
for n in server v3; do [ -x "$out/$n" ] && mv "$out/$n" "$out/etcd"; done
[ -x "$out/etcd" ] || die "etcd binary missing from $out"
t2=$SECONDS
log "download $((t1 - t0))s, build $((t2 - t1))s"
rm -rf "$K8S_BIN"; mv "$out" "$K8S_BIN"
printf 'k8s %s etcd %s go %s built %s download_s %s build_s %s\n' \
  "$K8S_VERSION" "$ETCD_VERSION" "$(go env GOVERSION)" "$date_now" "$((t1 - t0))" "$((t2 - t1))" > "$K8S_BIN/.complete"
"$K8S_BIN/kubelet" --version >&2
# not `| head -1`: with pipefail, etcd killed by SIGPIPE after head exits ends the script
# (seen on a brand-new machine: the build done, cluster-up failed)
etcd_version=$("$K8S_BIN/etcd" --version)
printf '%s\n' "${etcd_version%%$'\n'*}" >&2
log "done: $K8S_BIN"
