#!/usr/bin/env bash
# Build the decor-trainer wheel (trainer_image/pyproject.toml) into DIR (default dist/) and
# print the wheel's path. `pip install` that file into a training image (docs/contract.md).
#   hack/trainer-wheel.sh [DIR] [PIP_WHEEL_ARGS...]
# PYTHON picks the interpreter whose pip builds it (default python3). With setuptools >= 77
# there (the dev extra), the build uses it and needs no network (--no-build-isolation);
# otherwise pip fetches setuptools from the index into an isolated build environment.
# The wheel is built from a copy of the package's sources, so the checkout stays clean
# (setuptools writes build/ and *.egg-info next to the sources it builds).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}; [ $# -gt 0 ] && shift
python=${PYTHON:-python3}
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
cp -r "$root/trainer_image/pyproject.toml" "$root/trainer_image/README.md" "$root/trainer_image/decor_trainer" "$src/"
find "$src" -name '__pycache__' -prune -exec rm -rf {} +
isolation=()
if "$python" -c 'import importlib.metadata as m, sys; sys.exit(int(m.version("setuptools").split(".")[0]) < 77)' 2>/dev/null; then
  isolation=(--no-build-isolation)
fi
"$python" -m pip wheel -q --disable-pip-version-check --no-deps ${isolation[@]+"${isolation[@]}"} "$@" -w "$src/dist" "$src" >&2
wheels=("$src"/dist/decor_trainer-*-py3-none-any.whl)
[ ${#wheels[@]} = 1 ] && [ -f "${wheels[0]}" ] || { echo "trainer-wheel: no single wheel in $src/dist" >&2; exit 1; }
mkdir -p "$out"
cp "${wheels[0]}" "$out/"
echo "$(cd "$out" && pwd)/${wheels[0]##*/}"
