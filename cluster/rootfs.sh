# Root filesystem helpers of cluster/build-images.sh and cluster/trainer-rootfs-tests.sh
# (sourced, after cluster/lib.sh): overlay mounts of cached layer directories, chroot, pip.
# shellcheck shell=bash

CHROOT_MOUNTS=()  # mounted here, unmounted in reverse order by cleanup_mounts
cleanup_mounts() {
  local i
  for ((i = ${#CHROOT_MOUNTS[@]} - 1; i >= 0; i--)); do umount "${CHROOT_MOUNTS[$i]}" 2>/dev/null || umount -l "${CHROOT_MOUNTS[$i]}" 2>/dev/null || true; done
  CHROOT_MOUNTS=()
}

overlay_root() { # overlay_root MOUNT UPPER "LOWER_DIRS (top first)": the layers as one root, /proc in it
  local mnt=$1 upper=$2 lowers=$3
  mkdir -p "$mnt" "$upper" "$upper.work"
  mount -t overlay overlay -o "lowerdir=$(echo "$lowers" | tr ' ' ':'),upperdir=$upper,workdir=$upper.work" "$mnt"
  CHROOT_MOUNTS+=("$mnt")
  mount -t proc proc "$mnt/proc"; CHROOT_MOUNTS+=("$mnt/proc")
}

pip_layer() { # pip_layer OUT_DIR "LOWER_DIRS (top first)" FILE [--no-compile] PIP_ARGS...
  # What pip installs (inside the root filesystem of the lower layers, FILE copied to
  # /tmp/decor-pip) becomes OUT_DIR, a layer holding /usr/local only. pip resolves first
  # (--dry-run --report) with torch and numpy held at the installed versions (compiled against
  # each other: pip never replaces Debian's with a PyPI build), then installs exactly the
  # resolved distributions with --ignore-installed --no-deps: a newer version of a pure-Python
  # distribution Debian also ships (typing_extensions, sympy) goes to /usr/local, which comes
  # first on sys.path, and Debian's copy stays (pip cannot uninstall it: no RECORD file).
  local out=$1 lowers=$2 file=$3 mnt=$1.mnt compile=""; shift 3
  [ "${1:-}" = --no-compile ] && { compile=--no-compile; shift; }
  rm -rf "$out" "$out.work" "$mnt"
  overlay_root "$mnt" "$out" "$lowers"
  cp -L /etc/resolv.conf "$mnt/etc/resolv.conf"
  mkdir -p "$mnt/tmp/decor-pip"; cp "$file" "$mnt/tmp/decor-pip/"
  cp -L /etc/ssl/certs/ca-certificates.crt "$mnt/tmp/decor-pip/ca.crt"  # the host's trust (a proxy's CA)
  chroot "$mnt" /usr/bin/env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_CERT=/tmp/decor-pip/ca.crt \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_BREAK_SYSTEM_PACKAGES=1 \
    sh -c 'set -e; cd /tmp/decor-pip
      python3 -m pip list --format=freeze 2>/dev/null | grep -E "^(torch|numpy)==" > held.txt
      python3 -m pip install -q --dry-run --report plan.json -c held.txt "$@"
      python3 -c "import json; [print(i[\"download_info\"][\"url\"]) for i in json.load(open(\"plan.json\"))[\"install\"]]" > plan.txt
      if [ -s plan.txt ]; then python3 -m pip install -q --ignore-installed --no-deps '"$compile"' -r plan.txt; fi
      python3 -m pip check' pip "$@" >&2 ||
    { cleanup_mounts; die "pip install $* failed in the root filesystem of $lowers"; }
  cleanup_mounts
  # keep what pip wrote under /usr/local; the rest of the upper directory is scratch
  find "$out" -mindepth 1 -maxdepth 1 -not -name usr -exec rm -rf {} +
  find "$out/usr" -mindepth 1 -maxdepth 1 -not -name local -exec rm -rf {} +
  rm -rf "$out.work" "$mnt"
  [ -z "$(find "$out" -type c -print -quit)" ] || die "pip removed files of a lower layer in $out"
  # overlayfs's own attributes (trusted.overlay.*) must not reach the image's layer tar; an
  # opaque directory would hide a lower layer's files in the image: refused.
  python3 - "$out" <<'PY' || die "pip replaced a directory of a lower layer in $out"
import os, sys
opaque = []
for root, dirs, files in os.walk(sys.argv[1]):
    for path in [root] + [os.path.join(root, name) for name in dirs + files]:
        for key in os.listxattr(path, follow_symlinks=False):
            if key.startswith("trusted.overlay."):
                if key == "trusted.overlay.opaque":
                    opaque.append(path)
                os.removexattr(path, key, follow_symlinks=False)
sys.exit(f"opaque: {opaque[:5]}" if opaque else 0)
PY
}
