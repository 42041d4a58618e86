#!/usr/bin/env bash
# Build the decor-trainer wheel (trainer_image/pyproject.toml) into DIR (default dist/) and
# print the wheel's path. `pip install` that file into a training image (docs/contract.md).
#   hack/trainer-wheel.sh [DIR] [PIP_WHEEL_ARGS...]   e.g. --no-build-isolation (offline:
#                                                     needs setuptools >= 77 in $PYTHON)
# The wheel is built from a copy of the package's sources, so the checkout stays clean
# (setuptools writes build/ and *.egg-info next to the sources it builds). PYTHON picks the
# interpreter whose pip builds it (default python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}; [ $# -gt 0 ] && shift
python=${PYTHON:-python3}
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
cp -r "$root/trainer_image/pyproject.toml" "$root/trainer_image/README.md" "$root/trainer_image/decor_trainer" "$src/"
find "$src" -name '__pycache__' -prune -exec rm -rf {} +
"$python" -m pip wheel -q --disable-pip-version-check --no-deps "$@" -w "$src/dist" "$src" >&2
wheels=("$src"/dist/decor_trainer-*-py3-none-any.whl)
[ ${#wheels[@]} = 1 ] && [ -f "${wheels[0]}" ] || { echo "trainer-wheel: no single wheel in $src/dist" >&2; exit 1; }
mkdir -p "$out"
cp "${wheels[0]}" "$out/"
echo "$(cd "$out" && pwd)/${wheels[0]##*/}"
