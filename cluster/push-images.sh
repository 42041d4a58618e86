#!/usr/bin/env bash
# Build DECOR's operator and trainer images (cluster/build-images.sh --no-import: OCI archives,
# no Docker) and push them to a registry with skopeo (Debian's package, installed when
# missing):
#   REGISTRY/decor/operator:TAG   REGISTRY/decor/trainer:TAG
# then print the `helm install` lines that use them. `make images REGISTRY=...` runs this.
#
#   push-images.sh [--insecure] [--tag TAG] [--authfile FILE] [--dry-run] REGISTRY
#
#   REGISTRY         host[:port][/prefix], no scheme and no tag: registry.example.com/ml,
#                    127.0.0.1:5000 (also taken from the environment variable REGISTRY)
#   --insecure       plain HTTP, no TLS verification (REGISTRY_INSECURE=1). TLS is verified
#                    by default; a private CA goes to /etc/containers/certs.d/HOST/ca.crt.
#   --tag TAG        the images' tag (IMAGE_TAG; default: the chart's appVersion)
#   --authfile FILE  credentials (REGISTRY_AUTHFILE; default: skopeo's own auth file, which
#                    `skopeo login HOST` writes; run it as the user that runs this, root)
#   --dry-run        check the arguments and print what would be pushed and the helm lines;
#                    build, install and push nothing (no root needed)
# Exit status: 0 pushed; 1 build failed, registry unreachable or push refused; 2 bad arguments.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export LOG_TAG=push-images
. "$here/lib.sh"

usage() { sed -n '8,19p' "$0" | sed 's/^# \{0,1\}//' >&2; }
bad() { printf '[%s %s] ERROR: %s\n' "$(date +%H:%M:%S)" "$LOG_TAG" "$*" >&2; exit 2; }

registry=${REGISTRY:-}
insecure=${REGISTRY_INSECURE:-}
tag=${IMAGE_TAG:-}
authfile=${REGISTRY_AUTHFILE:-}
dry_run=0
while [ $# -gt 0 ]; do
  case $1 in
    --insecure) insecure=1 ;;
    --tag) [ $# -ge 2 ] || bad "--tag needs a value"; tag=$2; shift ;;
    --tag=*) tag=${1#--tag=} ;;
    --authfile) [ $# -ge 2 ] || bad "--authfile needs a value"; authfile=$2; shift ;;
    --authfile=*) authfile=${1#--authfile=} ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) usage; bad "unknown option $1" ;;
    *) registry=$1 ;;
  esac
  shift
done

# ------------------------------------------------------------------ arguments
[ -n "$registry" ] || bad "no registry given: make images REGISTRY=host:port/prefix (for example REGISTRY=registry.example.com/ml; REGISTRY_INSECURE=1 for a plain-HTTP one)"
case $registry in
  *://*) bad "REGISTRY is host[:port][/prefix] without a scheme, not '$registry'; for a plain-HTTP registry set REGISTRY_INSECURE=1" ;;
esac
registry=${registry%/}
host=${registry%%/*}
prefix=${registry#"$host"}
if ! [[ $host =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$ ]]; then
  bad "'$host' is not a registry host[:port] (REGISTRY=$registry)"
fi
if [ -n "$prefix" ] && ! [[ $prefix =~ ^(/[a-z0-9]+([._-][a-z0-9]+)*)+$ ]]; then
  bad "'${prefix#/}' is not a repository prefix: lowercase letters, digits and . _ - between slashes; no tag (REGISTRY=$registry)"
fi
case ${insecure,,} in
  1 | true | yes) tls_verify=false ;;
  '' | 0 | false | no) tls_verify=true ;;
  *) bad "REGISTRY_INSECURE must be 1 or 0, not '$insecure'" ;;
esac
if [ -z "$tag" ]; then
  tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$root/helm/decor/Chart.yaml")
fi
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || bad "'$tag' is not an image tag"
if [ -n "$authfile" ] && [ "$dry_run" = 0 ] && [ ! -r "$authfile" ]; then
  bad "no credentials file $authfile (REGISTRY_AUTHFILE): write it with skopeo login --authfile $authfile $host"
fi

operator_ref=$registry/decor/operator:$tag
trainer_ref=$registry/decor/trainer:$tag
auth_args=(); [ -n "$authfile" ] && auth_args=(--authfile "$authfile")
dest_auth_args=(); [ -n "$authfile" ] && dest_auth_args=(--dest-authfile "$authfile")

helm_lines() { # what to install with, on stdout
  cat <<EOF
# Install the operator from $registry:
helm install decor helm/decor -n decor-system --create-namespace \\
  --set image.repository=$registry/decor/operator --set image.tag=$tag \\
  --set trainer.sidecarImage=$trainer_ref
# A job's trainer image (spec.template.spec.containers[0].image): $trainer_ref
# A private registry: a pull Secret in decor-system and in each job's namespace, then
#   --set 'imagePullSecrets[0].name=SECRET' here and spec.template.spec.imagePullSecrets in jobs.
EOF
  if [ "$tls_verify" = false ]; then
    echo "# Plain HTTP: each node's container runtime must pull from $host over HTTP (containerd: a"
    echo "# hosts.toml with server = \"http://$host\" under its config_path)."
  fi
}

if [ "$dry_run" = 1 ]; then
  echo "# dry run: would build the images and push them with skopeo (TLS verification: $tls_verify)"
  echo "push operator docker://$operator_ref"
  echo "push trainer docker://$trainer_ref"
  helm_lines
  exit 0
fi

# ------------------------------------------------------------------ the registry answers
need_root
apt_ensure skopeo
errf=$(mktemp); trap 'rm -f "$errf" "$errf.digest"' EXIT

# explain MESSAGE ACTION: die with what skopeo said, turned into what to do
explain() {
  local msg=$1 action=$2
  case $msg in
    *"server gave HTTP response to HTTPS client"*)
      die "$host answers plain HTTP, not HTTPS: REGISTRY_INSECURE=1 (make images REGISTRY=$registry REGISTRY_INSECURE=1)" ;;
    *"connection refused"* | *"no such host"* | *"i/o timeout"* | *"network is unreachable"* | \
      *"no route to host"* | *"context deadline exceeded"* | *"connection reset"* | *"EOF"*)
      die "registry $host unreachable ($action): is it running, and is the address right? skopeo said: $msg" ;;
    *x509* | *certificate*)
      die "TLS verification of $host failed ($action): put its CA certificate in /etc/containers/certs.d/$host/ca.crt, or REGISTRY_INSECURE=1 for a registry without TLS. skopeo said: $msg" ;;
    *unauthorized* | *"authentication required"* | *denied* | *insufficient_scope* | *forbidden* | *" 401 "* | *" 403 "*)
      die "$host refused the $action: log in first with 'skopeo login $host' (as $(id -un); REGISTRY_AUTHFILE=FILE for another credentials file) and check that the account may push to ${registry}/decor/*. skopeo said: $msg" ;;
    *"Method not allowed"* | *"StatusCode: 405"* | *UNSUPPORTED*)
      die "$host refused the $action: it takes no pushes there (a read-only registry, or a mirror). skopeo said: $msg" ;;
    *)
      die "$action failed: $msg" ;;
  esac
}

log "checking that $host answers (TLS verification: $tls_verify)"
if ! skopeo --command-timeout 60s inspect --raw --tls-verify="$tls_verify" ${auth_args[@]+"${auth_args[@]}"} \
    "docker://$operator_ref" >/dev/null 2>"$errf"; then
  msg=$(tr '\n' ' ' < "$errf")
  case $msg in
    *"manifest unknown"* | *"name unknown"* | *"not found"* | *MANIFEST_UNKNOWN* | *NAME_UNKNOWN*) ;;  # answers; nothing there yet
    *) explain "$msg" "look-up of $operator_ref" ;;
  esac
fi

# ------------------------------------------------------------------ build, then push
log "building the images (cluster/build-images.sh --no-import)"
archives=$(DECOR_IMAGES="trainer operator" bash "$here/build-images.sh" --no-import | sed -n 's/^archive //p')
push() { # push NAME REF
  local name=$1 ref=$2 archive t=$SECONDS
  archive=$(awk -v n="$name" '$1 == n {print $2}' <<< "$archives")
  [ -n "$archive" ] && [ -f "$archive" ] || die "build-images.sh named no archive for $name"
  log "pushing $name: $archive -> docker://$ref"
  if ! skopeo copy --retry-times 2 --dest-tls-verify="$tls_verify" ${dest_auth_args[@]+"${dest_auth_args[@]}"} \
      --digestfile "$errf.digest" "oci-archive:$archive" "docker://$ref" >&2 2>"$errf"; then
    explain "$(tr '\n' ' ' < "$errf")" "push of $ref"
  fi
  log "pushed $ref@$(cat "$errf.digest") in $((SECONDS - t))s"
}
push operator "$operator_ref"
push trainer "$trainer_ref"
helm_lines
