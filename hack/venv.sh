#!/usr/bin/env bash
# Make (or reuse) the project's Python environment and print its path.
# PyTorch comes from Debian's python3-torch (CPU, small); the venv sees it through
# --system-site-packages. Everything else comes from PyPI. The venv is cached outside the
# repository, keyed by the hash of both pyproject.toml files; the repository's two distributions
# are installed editable: decor-trainer (trainer_image/) and decor, which depends on it.
# --apt-only: install the Debian packages it needs, and stop there (CI does it before its
# background builds start, so that nothing else holds apt's lock meanwhile).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${DECOR_CACHE:-/var/cache/decor}
key=$(cat "$root/pyproject.toml" "$root/trainer_image/pyproject.toml" "$root/hack/venv.sh" | sha256sum | cut -c1-12)  # content, not path
venv="$cache/venv-$key"
log() { printf '[venv] %s\n' "$*" >&2; }
editable_roots() {  # where the venv imports decor and decor_trainer from (without importing them)
  "$venv/bin/python" -c 'import importlib.util as u, os.path as p
print(*(p.dirname(u.find_spec(m).origin) for m in ("decor", "decor_trainer")))' 2>/dev/null || true
}
if ! /usr/bin/python3 -c 'import importlib.util as u; exit(not (u.find_spec("torch") and u.find_spec("venv")))' 2>/dev/null; then
  log "installing Debian packages (python3-torch, python3-venv)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends python3-torch python3-venv python3-numpy >&2
fi
[ "${1:-}" != --apt-only ] || exit 0
# One pip at a time per cache: two `make` calls at once (CI runs the e2e lanes beside the scale
# smoke run) each evaluate this script, and two editable installs into one venv race.
mkdir -p "$cache"
exec 9>"$cache/venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  log "creating $venv"
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  # numpy<2: Debian's torch 1.13 is built against NumPy 1.x and cannot use NumPy 2.
  # The constraint pins torch to the version already installed, so no dependency (of the
  # integrations extra, say) can make pip pull a multi-GB PyPI wheel: it fails instead.
  torch_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
  constraints="$venv/constraints.txt"
  printf 'torch==%s\nnumpy<2\n' "$torch_version" >"$constraints"
  # decor-trainer is named on the same command line: pip takes it from trainer_image/, never
  # from an index, when it resolves decor's dependency on it.
  "$venv/bin/pip" install -q -c "$constraints" -e "$root/trainer_image" -e "$root[operator,dev,integrations]" >&2
  touch "$venv/.complete"
elif [ "$(editable_roots)" != "$root/operator/decor $root/trainer_image/decor_trainer" ]; then
  # the editable installs point at another checkout (CI clones elsewhere): point them here
  "$venv/bin/pip" install -q --no-deps -e "$root/trainer_image" -e "$root" >&2
fi
echo "$venv"
