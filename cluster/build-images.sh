#!/usr/bin/env bash
# Build DECOR's container images without Docker and import them into the test bed's
# containerd (namespace k8s.io):
#   localhost/decor/trainer:0.1.0   Debian trixie minbase + python3 (3.13), python3-torch (2.x,
#                                   CPU), python3-prometheus-client, python3-yaml, python3-pip;
#                                   then the pinned Lightning and transformers
#                                   (trainer_image/frameworks-torch2.txt) and the decor-trainer
#                                   wheel (hack/trainer-wheel.sh), each installed with pip
#                                   inside the root filesystem as a user's image takes them
#                                   (--break-system-packages)
#   localhost/decor/operator:0.1.0  Debian bookworm minbase + python3, python3-yaml
#                                   + kopf/kubernetes/requests/prometheus-client (PyPI, pinned)
#                                   + the decor package and decor_trainer.contract
# Root filesystems come from debootstrap; each stage is cached under $DECOR_CACHE/images keyed
# by a hash of its inputs; images are OCI archives made by cluster/oci-pack.py (uncompressed
# layers: the apt/pip stages, then the project's code) and imported with `ctr images import`. Equivalent to
# trainer_image/Dockerfile and operator/Dockerfile (what `make kind-up` builds with Docker).
# Options: --no-import (only build the archives; their paths are printed on stdout as
# `archive NAME PATH` lines, which cluster/push-images.sh reads to push them to a registry).
# DECOR_IMAGES (default "trainer operator") picks the images to build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export LOG_TAG=images
. "$here/lib.sh"
need_root
do_import=1; [ "${1:-}" = --no-import ] && do_import=0

SUITE=bookworm         # the operator's Debian release
TORCH2_SUITE=trixie    # the trainer's (python3-torch 2.6, Python 3.13)
TRAINER_IMAGE=localhost/decor/trainer:0.1.0
TORCH2_APT="python3 python3-torch python3-prometheus-client python3-yaml python3-pip"
IMAGES=" ${DECOR_IMAGES:-trainer operator} "
for i in $IMAGES; do
  case $i in trainer | operator) ;; *) die "DECOR_IMAGES: no image '$i' (trainer, operator)" ;; esac
done
OPERATOR_IMAGE=localhost/decor/operator:0.1.0
OPERATOR_APT="python3 python3-yaml"
IMG=$DECOR_CACHE/images
SITE=usr/local/lib/python3.11/dist-packages
mkdir -p "$IMG"
t_all=$SECONDS
pip_py=python3  # the pip that builds and installs into the root filesystems
"$pip_py" -m pip --version >/dev/null 2>&1 || pip_py=/usr/bin/python3

# ------------------------------------------------------------------ Debian mirror (host's own)
# The mirror is read from this machine's apt configuration, so nothing is hard-coded here.
apt_uri() { # apt_uri SUITE -> the first URI that serves SUITE (deb822 or one-line sources)
  local suite=$1 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" 'BEGIN{RS=""; FS="\n"} {
        uri=""; ok=0; deb=0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) { split($i, a, " "); uri = a[2] }
          if ($i ~ /^Suites:/) { n = split($i, b, " "); for (j = 2; j <= n; j++) if (b[j] == s) ok = 1 }
          if ($i ~ /^Types:/ && $i ~ /(^|[ :])deb( |$)/) deb = 1
        }
        if (ok && deb && uri != "") { print uri; exit }
      }' "$f"
  done | sed -n 1p  # reads to the end: no SIGPIPE for the writers under pipefail
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) == s) { print $i; exit } }' "$f"
  done | sed -n 1p  # reads to the end: no SIGPIPE for the writers under pipefail
}
MIRROR=${DECOR_DEBIAN_MIRROR:-$(apt_uri "$SUITE" | sed -n 1p)}
SECURITY=${DECOR_DEBIAN_SECURITY:-$(apt_uri "$SUITE-security" | sed -n 1p)}
[ -n "$MIRROR" ] || die "no Debian mirror for $SUITE in /etc/apt/sources*; set DECOR_DEBIAN_MIRROR"
mirror_of() { # mirror_of SUITE -> the host's URI for SUITE, else the one of $SUITE (same archive)
  local uri; uri=$(apt_uri "$1" | sed -n 1p); echo "${uri:-$MIRROR}"
}
security_of() { # security_of SUITE -> the security archive's URI (or nothing)
  [ -n "$SECURITY" ] || return 0
  local uri; uri=$(apt_uri "$1-security" | sed -n 1p); echo "${uri:-$SECURITY}"
}

hash_of() { # hash_of STRING FILES... -> 12 hex digits
  local s=$1; shift
  {
    printf '%s\n' "$s"
    local a
    for a in "$@"; do  # contents and relative paths, not where the inputs lie
      if [ -d "$a" ]; then
        (cd "$a" && find . -type f -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 -r sha256sum)
      else
        printf '%s %s\n' "$(sha256sum < "$a" | cut -c1-64)" "${a##*/}"
      fi
    done
  } | sha256sum | cut -c1-12
}

# ------------------------------------------------------------------ chroot helpers
. "$here/rootfs.sh"  # CHROOT_MOUNTS, cleanup_mounts, pip_layer
trap cleanup_mounts EXIT
chroot_apt() { # chroot_apt ROOTFS SUITE PACKAGES...: apt-get install (no recommends) inside ROOTFS
  local r=$1 suite=$2 mirror security; shift 2
  mirror=$(mirror_of "$suite"); security=$(security_of "$suite")
  mount -t proc proc "$r/proc"; CHROOT_MOUNTS+=("$r/proc")
  cp -L /etc/resolv.conf "$r/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' > "$r/usr/sbin/policy-rc.d"; chmod +x "$r/usr/sbin/policy-rc.d"
  {
    echo "deb $mirror $suite main"
    echo "deb $mirror $suite-updates main"
    [ -n "$security" ] && echo "deb $security $suite-security main"
  } > "$r/etc/apt/sources.list"
  printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' > "$r/etc/apt/apt.conf.d/99decor"
  chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $* >/dev/null && apt-get clean" >&2
  rm -rf "$r/var/lib/apt/lists/"* "$r/var/cache/apt/"*.bin "$r/usr/sbin/policy-rc.d"
  : > "$r/etc/resolv.conf"
  cleanup_mounts
}

# ------------------------------------------------------------------ stage 0: minbase rootfs
minbase() { # minbase SUITE -> prints the debootstrapped minbase rootfs of SUITE (cached)
  local suite=$1 k dir t
  k=$(hash_of "debootstrap minbase $suite v1")
  dir=$IMG/minbase-$suite-$k
  if [ ! -f "$dir/.complete" ]; then
    apt_ensure debootstrap
    log "debootstrap --variant=minbase $suite -> $dir (mirror from the host's apt sources)"
    t=$SECONDS
    rm -rf "$dir"
    debootstrap --variant=minbase --components=main "$suite" "$dir" "$(mirror_of "$suite")" >"$IMG/debootstrap-$suite.log" 2>&1 ||
      { tail -n 30 "$IMG/debootstrap-$suite.log" >&2; die "debootstrap failed; see $IMG/debootstrap-$suite.log"; }
    rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/lib/apt/lists/"*
    echo "debootstrap_s $((SECONDS - t))" > "$dir/.complete"
    log "debootstrap done in $((SECONDS - t))s ($(du -sh "$dir" | cut -f1))"
  else
    log "cached: $dir"
  fi
  echo "$dir"
}
base0=$(minbase "$SUITE")
k0=${base0##*-}

# ------------------------------------------------------------------ stage 1: apt layers
stage1() { # stage1 NAME "PACKAGES" [SUITE] -> prints the rootfs directory
  local name=$1 pkgs=$2 suite=${3:-$SUITE} base=$base0 key0=$k0 k dir t
  if [ "$suite" != "$SUITE" ]; then base=$(minbase "$suite"); key0="$suite ${base##*-}"; fi
  k=$(hash_of "$name $key0 $pkgs v1")
  dir=$IMG/$name-$k
  if [ ! -f "$dir/.complete" ]; then
    log "$name: apt-get install $pkgs (no recommends) -> $dir"
    t=$SECONDS
    rm -rf "$dir" "$dir.tmp"
    cp -a "$base" "$dir.tmp"; rm -f "$dir.tmp/.complete"
    chroot_apt "$dir.tmp" "$suite" "$pkgs"
    mv "$dir.tmp" "$dir"
    echo "apt_s $((SECONDS - t))" > "$dir/.complete"
    log "$name: done in $((SECONDS - t))s ($(du -sh --exclude=.complete "$dir" | cut -f1))"
    # older versions of this stage
    find "$IMG" -maxdepth 1 -name "$name-*" -not -name "$name-$k" -not -name "$name-$k.layer.*" -exec rm -rf {} + 2>/dev/null || true
  else
    log "cached: $dir"
  fi
  echo "$dir"
}
torch2_apt=""  # the trainer's layers keep the cache prefix torch2-trainer- (PyTorch 2.x)
case "$IMAGES" in *" trainer "*) torch2_apt=$(stage1 torch2-trainer-apt "$TORCH2_APT" "$TORCH2_SUITE") ;; esac

operator_base_key=$(hash_of "operator-base $k0 $OPERATOR_APT v1" "$here/operator-image-requirements.txt")
operator_base=$IMG/operator-base-$operator_base_key
if [ ! -f "$operator_base/.complete" ]; then
  apt_base=$(stage1 operator-apt "$OPERATOR_APT")
  log "operator: pip install -r cluster/operator-image-requirements.txt into the rootfs"
  t=$SECONDS
  rm -rf "$operator_base.tmp"; mkdir -p "$operator_base.tmp/$SITE"
  # Same CPython minor (3.11) and libc family as the image, so wheels fit; cp311 manylinux.
  "$pip_py" -m pip install -q --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --no-compile --target "$operator_base.tmp/$SITE" \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 --platform linux_x86_64 --only-binary=:all: \
    -r "$here/operator-image-requirements.txt" >&2
  rm -rf "$operator_base.tmp/$SITE/bin"
  echo "pip_s $((SECONDS - t)) apt_base $apt_base" > "$operator_base.tmp/.complete"
  find "$IMG" -maxdepth 1 -name "operator-base-*" -not -name "operator-base-$operator_base_key" -not -name "operator-base-$operator_base_key.*" -exec rm -rf {} + 2>/dev/null || true
  mv "$operator_base.tmp" "$operator_base"
  log "operator: pip done in $((SECONDS - t))s"
else
  log "cached: $operator_base"
  apt_base=$(stage1 operator-apt "$OPERATOR_APT")
fi

# ------------------------------------------------------------------ images
ctr_k8s() { /usr/bin/ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }
image_key_in_containerd() { # the decor.key label of NAME in containerd, or nothing
  ctr_k8s images ls "name==$1" 2>/dev/null | awk 'NR > 1 {print $NF}' | tr ',' '\n' | sed -n 's/^decor.key=//p'
}
containerd_up() { [ -S "$CONTAINERD_SOCK" ] && ctr_k8s version >/dev/null 2>&1; }

# Both images run as a non-root user by default (numeric, so that Kubernetes can check
# runAsNonRoot without a passwd entry); HOME points at a directory any user may write.
TRAINER_USER=1000:1000   # build.TRAINER_UID/TRAINER_GID in operator/decor/core/build.py
OPERATOR_USER=65534:65534  # nobody, as the chart's podSecurityContext

image_built() { # image_built NAME KEY: the image of KEY is at hand (its archive, or in containerd)
  local short=${1#localhost/decor/}; short=${short%%:*}
  if [ "$do_import" = 0 ]; then [ -f "$IMG/$short-$2.oci.tar" ]; else containerd_up && [ "$(image_key_in_containerd "$1")" = "$2" ]; fi
}

build_image() { # build_image NAME KEY CMD_JSON USER LAYER_DIR...: one layer per directory
  local name=$1 key=$2 cmd=$3 user=$4; shift 4
  local short=${name#localhost/decor/}; short=${short%%:*}
  local t args=() r
  for r in "$@"; do args+=(--layer "$r"); done
  args+=(--name "$name" --cmd "$cmd" --user "$user" --env HOME=/tmp
         --env PYTHONUNBUFFERED=1 --env PYTHONDONTWRITEBYTECODE=1
         --workdir / --label "org.opencontainers.image.title=$short" --label "dev.decor.key=$key")
  if [ "$do_import" = 0 ]; then
    local archive=$IMG/$short-$key.oci.tar
    ARCHIVES+=("$short $archive")
    if image_built "$name" "$key"; then log "$short: cached archive $archive"; return 0; fi
    t=$SECONDS
    python3 "$here/oci-pack.py" "${args[@]}" --out "$archive"
    find "$IMG" -maxdepth 1 -name "$short-*.oci.tar" -not -name "$short-$key.oci.tar" -delete
    log "$short: archive $archive in $((SECONDS - t))s ($(du -h "$archive" | cut -f1))"
    return 0
  fi
  containerd_up || die "the test bed's containerd is not running ($CONTAINERD_SOCK): run 'make cluster-up' first, or push the images to a registry instead: make images REGISTRY=host:port/prefix"
  if image_built "$name" "$key"; then
    log "$short: $name already in containerd (key $key)"
    return 0
  fi
  # Layers containerd already holds (the big base layers, from an earlier import) are left
  # out of the archive: the import then takes seconds.
  t=$SECONDS
  local present archive
  present=$(mktemp "$IMG/.present-XXXXXX"); archive=$(mktemp "$IMG/.import-XXXXXX.oci.tar")
  ctr_k8s content ls -q > "$present" 2>/dev/null || : > "$present"
  python3 "$here/oci-pack.py" "${args[@]}" --present "$present" --out "$archive"
  log "$short: packed in $((SECONDS - t))s ($(du -h "$archive" | cut -f1)); importing into containerd (namespace k8s.io)"
  t=$SECONDS
  ctr_k8s images import "$archive" >&2 || { rm -f "$present" "$archive"; die "ctr images import failed for $name"; }
  ctr_k8s images label "$name" "decor.key=$key" >/dev/null
  rm -f "$present" "$archive"
  find "$IMG" -maxdepth 1 -name "$short-*.oci.tar" -delete  # --no-import archives are stale now
  log "$short: imported in $((SECONDS - t))s"
}

ARCHIVES=()  # "NAME PATH" of each archive --no-import built or found

tdir=$(mktemp -d); odir=$(mktemp -d); trap 'cleanup_mounts; rm -rf "$tdir" "$tdir.dist" "$odir"' EXIT
[ -d "$root/trainer_image/decor_trainer" ] || die "trainer_image/decor_trainer not found in $root"

# trainer: Debian trixie's PyTorch 2.x. Two layers on the apt rootfs, each the upper
# directory of an overlay mount whose root filesystem pip runs in: the pinned frameworks, then
# the decor-trainer wheel. pip installs with --break-system-packages, as a user's Dockerfile
# on a Debian base would: an image runs one program, root's pip writes only /usr/local (never
# Debian's /usr/lib/python3), and `python3` stays the command (a venv would change it). Every
# distribution Debian installed is held at its version (a constraints file), so pip never
# replaces Debian's torch or numpy with a PyPI build.
if [ -n "$torch2_apt" ]; then
  fw_req=$root/trainer_image/frameworks-torch2.txt
  fw_key=$(hash_of "torch2-frameworks $torch2_apt v1" "$fw_req" "$here/rootfs.sh")
  frameworks=$IMG/torch2-trainer-frameworks-$fw_key
  if [ ! -f "$frameworks/.complete" ]; then
    log "trainer: pip install -r ${fw_req#$root/} in the $TORCH2_SUITE root filesystem"
    t=$SECONDS
    pip_layer "$frameworks.tmp" "$torch2_apt" "$fw_req" -r /tmp/decor-pip/frameworks-torch2.txt
    echo "pip_s $((SECONDS - t))" > "$frameworks.tmp/.complete"
    find "$IMG" -maxdepth 1 -name "torch2-trainer-frameworks-*" -not -name "torch2-trainer-frameworks-$fw_key" -not -name "torch2-trainer-frameworks-$fw_key.*" -exec rm -rf {} + 2>/dev/null || true
    mv "$frameworks.tmp" "$frameworks"
    log "trainer: frameworks installed in $((SECONDS - t))s ($(du -sh --exclude=.complete "$frameworks" | cut -f1))"
  else
    log "cached: $frameworks"
  fi
  t2key=$(hash_of "torch2-trainer $frameworks v1 $TRAINER_USER" "$root/trainer_image/pyproject.toml" \
    "$root/trainer_image/README.md" "$root/trainer_image/decor_trainer" "$root/hack/trainer-wheel.sh" "$here/oci-pack.py")
  t2dir=$IMG/torch2-trainer-wheel-$t2key
  if [ ! -f "$t2dir/.complete" ]; then
    t=$SECONDS
    wheel=$(PYTHON=$pip_py bash "$root/hack/trainer-wheel.sh" "$tdir.dist") || die "building the decor-trainer wheel failed"
    pip_layer "$t2dir.tmp" "$frameworks $torch2_apt" "$wheel" --no-compile "/tmp/decor-pip/${wheel##*/}"
    rm -rf "$tdir.dist"
    mkdir -p "$t2dir.tmp/var/lib/decor/checkpoints"
    chown "$TRAINER_USER" "$t2dir.tmp/var/lib/decor/checkpoints"
    echo "pip_s $((SECONDS - t))" > "$t2dir.tmp/.complete"
    find "$IMG" -maxdepth 1 -name "torch2-trainer-wheel-*" -not -name "torch2-trainer-wheel-$t2key*" -exec rm -rf {} + 2>/dev/null || true
    mv "$t2dir.tmp" "$t2dir"
    log "trainer: ${wheel##*/} installed with pip in $((SECONDS - t))s"
  fi
  build_image "$TRAINER_IMAGE" "$t2key" '["python3", "-m", "decor_trainer.train"]' "$TRAINER_USER" "$torch2_apt" "$frameworks" "$t2dir"
  TORCH2_ROOTFS="$t2dir $frameworks $torch2_apt"  # top first; cluster/trainer-rootfs.sh mounts them
  echo "$TORCH2_ROOTFS" > "$IMG/torch2-trainer.rootfs"
fi

case "$IMAGES" in *" operator "*)
# operator: the decor package + a `decor` command
[ -d "$root/operator/decor" ] || die "operator/decor not found in $root"
mkdir -p "$odir/$SITE" "$odir/usr/local/bin"
cp -r "$root/operator/decor" "$odir/$SITE/"
# the trainer's contract (the names both sides share); nothing else of decor_trainer
mkdir -p "$odir/$SITE/decor_trainer"
cp "$root/trainer_image/decor_trainer/__init__.py" "$root/trainer_image/decor_trainer/contract.py" "$odir/$SITE/decor_trainer/"
find "$odir" -name '__pycache__' -prune -exec rm -rf {} +
printf '#!/usr/bin/python3\nimport sys\nfrom decor.cli import main\nsys.exit(main())\n' > "$odir/usr/local/bin/decor"
chmod -R u=rwX,go=rX "$odir"; chmod 755 "$odir/usr/local/bin/decor"
okey=$(hash_of "operator $apt_base $operator_base v2 $OPERATOR_USER" "$odir" "$here/oci-pack.py")
build_image "$OPERATOR_IMAGE" "$okey" '["decor", "operator"]' "$OPERATOR_USER" "$apt_base" "$operator_base" "$odir"
;; esac

# Drop what older builds left in containerd: the CRI keeps a `sha256:<config>` reference per
# image it has seen; references whose config no named image uses any more are removed, and
# containerd's garbage collector then frees their content and snapshots.
if [ "$do_import" = 1 ]; then
  keep=" "
  while read -r ref digest; do
    cfg=$(ctr_k8s content get "$digest" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"])' 2>/dev/null) || continue
    keep="$keep$cfg "
  done < <(ctr_k8s images ls 2>/dev/null | awk 'NR > 1 && $1 !~ /^sha256:/ {print $1, $3}')
  for ref in $(ctr_k8s images ls -q 2>/dev/null | grep '^sha256:' || true); do
    case "$keep" in *" $ref "*) ;; *) log "removing stale image reference $ref"; ctr_k8s images rm "$ref" >/dev/null 2>&1 || true ;; esac
  done
fi
log "images ready in $((SECONDS - t_all))s:$IMAGES"
for a in ${ARCHIVES[@]+"${ARCHIVES[@]}"}; do echo "archive $a"; done
