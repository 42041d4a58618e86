#!/usr/bin/env bash
# Run decor_trainer's tests with the Python and PyTorch (2.x) of the trainer image
# (localhost/decor/trainer, built by cluster/build-images.sh): the image's layers are
# mounted as one root filesystem (overlay, with a scratch upper directory) with pytest added
# in a cached layer of its own, this checkout bound at /src, and the tests run there in a
# chroot. Prints the PyTorch, Python, Lightning and transformers versions it tests.
#   cluster/trainer-rootfs-tests.sh [PYTEST_ARGS...]   (the trainer tests below unless a tests/ path is given)
# Needs root (mount, chroot) and the image's layers (cluster/build-images.sh; in CI the
# background build `build-images.sh --no-import` makes them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export LOG_TAG=torch2-tests
. "$here/lib.sh"
. "$here/rootfs.sh"
need_root
trap cleanup_mounts EXIT

PYTEST_PIN="pytest==9.1.1"  # the version of the project's venv (pytest >= 7, < 9.2: pyproject.toml)
# The trainer's tests: reporter, checkpoint and exact resume, data-parallel world-size changes
# (gloo), the reference workloads and encoder_loop, the Lightning and HF callbacks. Not
# tests/integration/test_own_loop.py: it drives the examples through `decor run --local`, the
# operator side's local runtime, which runs on the host.
TESTS=(tests/unit/test_reporter.py tests/unit/test_checkpoint.py tests/unit/test_distributed.py
  tests/unit/test_encoder_loop.py tests/unit/test_threads.py tests/unit/test_callbacks.py
  tests/integration/test_trainer.py tests/integration/test_data_parallel.py)

IMG=$DECOR_CACHE/images
[ -f "$IMG/torch2-trainer.rootfs" ] || die "no trainer image layers in $IMG: run DECOR_IMAGES=trainer cluster/build-images.sh --no-import first"
layers=$(cat "$IMG/torch2-trainer.rootfs")
for d in $layers; do [ -f "$d/.complete" ] || die "layer $d is missing: build the image again"; done

key=$(printf '%s\n' "$layers $PYTEST_PIN v1" | sha256sum | cut -c1-12)
pytest_layer=$IMG/torch2-trainer-pytest-$key
if [ ! -f "$pytest_layer/.complete" ]; then
  log "pip install $PYTEST_PIN into a layer on the image's root filesystem"
  find "$IMG" -maxdepth 1 -name "torch2-trainer-pytest-*" -exec rm -rf {} + 2>/dev/null || true
  pin=$(mktemp); echo "$PYTEST_PIN" > "$pin"
  pip_layer "$pytest_layer.tmp" "$layers" "$pin" -r "/tmp/decor-pip/${pin##*/}"
  rm -f "$pin"; touch "$pytest_layer.tmp/.complete"; mv "$pytest_layer.tmp" "$pytest_layer"
fi

scratch=$(mktemp -d /tmp/decor-torch2-tests.XXXXXX)
trap 'cleanup_mounts; rm -rf "$scratch"' EXIT
mnt=$scratch/root
overlay_root "$mnt" "$scratch/upper" "$pytest_layer $layers"
mount -t tmpfs -o size=2g tmpfs "$mnt/tmp"; CHROOT_MOUNTS+=("$mnt/tmp")
mount --rbind /dev "$mnt/dev"; mount --make-rslave "$mnt/dev"; CHROOT_MOUNTS+=("$mnt/dev")
mkdir -p "$mnt/src"; mount --bind "$root" "$mnt/src"; CHROOT_MOUNTS+=("$mnt/src")
cp -L /etc/hosts "$mnt/etc/hosts"  # localhost for gloo's rendezvous

case " $* " in *" tests/"*) ;; *) set -- "$@" "${TESTS[@]}" ;; esac  # no test named: the trainer's
chroot "$mnt" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/src/trainer_image sh -c 'cd /src && python3 -c "
import platform, torch, importlib.metadata as m
print(\"torch\", torch.__version__, \"python\", platform.python_version(),
      \"lightning\", m.version(\"lightning\"), \"transformers\", m.version(\"transformers\"))
" && exec python3 -m pytest -p no:cacheprovider "$@"' pytest "$@"
