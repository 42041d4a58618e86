#!/usr/bin/env python3
"""Pack root filesystem directories into an OCI image archive (uncompressed layers).

Each --layer DIR becomes one layer, in order (later layers add or replace files); all
--rootfs DIRs together become a single layer. The archive holds oci-layout, index.json and
blobs/sha256/{layers,config,manifest}; the index entry carries
`org.opencontainers.image.ref.name` and `io.containerd.image.name`, so
`ctr -n k8s.io images import FILE` registers it under NAME. Standard library only.

Layer caching: a --layer directory that holds a `.complete` marker (a finished, cached build
stage) keeps its layer tar beside it (DIR.layer.tar + DIR.layer.sha256), so it is tarred
and hashed once. --present FILE lists blob digests the target content store already has;
those layer blobs are left out of the archive (a "thin" archive, imported in seconds; the
image's layers come from the store).

usage: oci-pack.py (--layer DIR ... | --rootfs DIR ...) --name localhost/decor/x:tag --out FILE.tar
                   [--entrypoint JSON] [--cmd JSON] [--env K=V ...] [--workdir DIR]
                   [--label K=V ...] [--user UID[:GID]] [--present FILE]
"""

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

EPOCH = 0  # reproducible archive members


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_layer(roots, out):
    # GNU tar keeps ownership, modes, device nodes, hard links and xattrs (file caps).
    cmd = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--sort=name",
           "--exclude=./.complete", "-cf", out]
    for r in roots:
        cmd += ["-C", os.path.abspath(r), "."]
    subprocess.run(cmd, check=True)
    return sha256_file(out)


def cached_layer(d, tmp):
    """(path, digest) of DIR's layer tar, cached beside DIR when DIR is a finished stage."""
    d = os.path.abspath(d).rstrip("/")
    marker = os.path.join(d, ".complete")
    if not os.path.exists(marker):
        out = os.path.join(tmp, f"layer-{len(os.listdir(tmp))}.tar")
        return out, make_layer([d], out)
    tar_path, sum_path = d + ".layer.tar", d + ".layer.sha256"
    if (os.path.exists(tar_path) and os.path.exists(sum_path)
            and os.path.getmtime(sum_path) >= os.path.getmtime(marker)):
        with open(sum_path) as f:
            return tar_path, f.read().strip()
    digest = make_layer([d], tar_path + ".partial")
    os.replace(tar_path + ".partial", tar_path)
    with open(sum_path + ".partial", "w") as f:
        f.write(digest + "\n")
    os.replace(sum_path + ".partial", sum_path)
    return tar_path, digest


def add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = EPOCH
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def add_dir(tar, name):
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = EPOCH
    tar.addfile(info)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layer", action="append", default=[],
                   help="directory that becomes one layer (repeat: one layer each, in order)")
    p.add_argument("--rootfs", action="append", default=[],
                   help="directory merged with the other --rootfs ones into a single layer")
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--entrypoint", default="null")
    p.add_argument("--cmd", default="null")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--workdir", default="/")
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--user", default="", help="numeric UID[:GID] the image runs as (config User)")
    p.add_argument("--present", help="file of sha256:... digests the target store already has")
    a = p.parse_args()
    if bool(a.layer) == bool(a.rootfs):
        sys.exit("oci-pack: give either --layer DIR... or --rootfs DIR...")
    for r in a.layer + a.rootfs:
        if not os.path.isdir(r):
            sys.exit(f"oci-pack: no such directory: {r}")
    present = set()
    if a.present:
        with open(a.present) as f:
            present = {line.strip() for line in f if line.strip()}
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
    outdir = os.path.dirname(os.path.abspath(a.out))
    with tempfile.TemporaryDirectory(dir=outdir) as tmp:
        if a.rootfs:
            path = os.path.join(tmp, "layer.tar")
            layers = [(path, make_layer(a.rootfs, path))]
        else:
            layers = [cached_layer(d, tmp) for d in a.layer]
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
        env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + a.env
        cfg = {"Env": env, "WorkingDir": a.workdir}
        labels = dict(kv.split("=", 1) for kv in a.label)
        if labels:
            cfg["Labels"] = labels
        if a.user:
            if not all(part.isdigit() for part in a.user.split(":", 1)):
                sys.exit(f"oci-pack: --user must be numeric UID[:GID], got {a.user!r}")
            cfg["User"] = a.user
        if json.loads(a.entrypoint) is not None:
            cfg["Entrypoint"] = json.loads(a.entrypoint)
        if json.loads(a.cmd) is not None:
            cfg["Cmd"] = json.loads(a.cmd)
        config = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "architecture": arch,
            "os": "linux",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for _, d in layers]},
            "history": [{"created_by": "decor cluster/oci-pack.py"} for _ in layers],
        }
        config_b = json.dumps(config, sort_keys=True).encode()
        config_d = hashlib.sha256(config_b).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": f"sha256:{config_d}", "size": len(config_b)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": f"sha256:{d}", "size": os.path.getsize(path)}
                       for path, d in layers],
        }
        manifest_b = json.dumps(manifest, sort_keys=True).encode()
        manifest_d = hashlib.sha256(manifest_b).hexdigest()
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_d}", "size": len(manifest_b),
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": tag,
                                "io.containerd.image.name": a.name},
            }],
        }
        tmp_out = a.out + ".partial"
        omitted = 0
        with tarfile.open(tmp_out, "w", format=tarfile.PAX_FORMAT) as t:
            add_bytes(t, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
            add_bytes(t, "index.json", json.dumps(index, sort_keys=True).encode())
            add_dir(t, "blobs")
            add_dir(t, "blobs/sha256")
            add_bytes(t, f"blobs/sha256/{config_d}", config_b)
            add_bytes(t, f"blobs/sha256/{manifest_d}", manifest_b)
            written = set()
            for path, d in layers:
                if f"sha256:{d}" in present or d in written:
                    omitted += 1
                    continue
                written.add(d)
                info = t.gettarinfo(path, arcname=f"blobs/sha256/{d}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
                with open(path, "rb") as f:
                    t.addfile(info, f)
        os.replace(tmp_out, a.out)
        sizes = "+".join(f"{os.path.getsize(pth) // (1 << 20)}" for pth, _ in layers)
    print(f"oci-pack: {a.name} -> {a.out} ({len(layers)} layer(s), {sizes} MiB"
          f"{f', {omitted} already in the store left out' if omitted else ''}; "
          f"manifest sha256:{manifest_d[:12]})", file=sys.stderr)


if __name__ == "__main__":
    main()
