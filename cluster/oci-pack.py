#!/usr/bin/env python3
"""Pack a root filesystem directory into an OCI image archive (one uncompressed layer).

The archive holds oci-layout, index.json and blobs/sha256/{layer,config,manifest}; the
index entry carries `org.opencontainers.image.ref.name` and `io.containerd.image.name`, so
`ctr -n k8s.io images import FILE` registers it under NAME. Standard library only.

usage: oci-pack.py --rootfs DIR [--rootfs DIR2 ...] --name localhost/decor/x:tag --out FILE.tar
                   [--entrypoint JSON] [--cmd JSON] [--env K=V ...] [--workdir DIR]
                   [--label K=V ...]
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
    p.add_argument("--rootfs", action="append", required=True,
                   help="directory to pack; several are merged in order (later ones add files)")
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--entrypoint", default="null")
    p.add_argument("--cmd", default="null")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--workdir", default="/")
    p.add_argument("--label", action="append", default=[])
    a = p.parse_args()
    for r in a.rootfs:
        if not os.path.isdir(r):
            sys.exit(f"oci-pack: no such rootfs directory: {r}")
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
    outdir = os.path.dirname(os.path.abspath(a.out))
    with tempfile.TemporaryDirectory(dir=outdir) as tmp:
        layer = os.path.join(tmp, "layer.tar")
        # GNU tar keeps ownership, modes, device nodes, hard links and xattrs (file caps).
        # Several roots become one layer: later roots' entries follow (and win on extract).
        cmd = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--sort=name",
               "--exclude=./.complete", "-cf", layer]
        for r in a.rootfs:
            cmd += ["-C", os.path.abspath(r), "."]
        subprocess.run(cmd, check=True)
        layer_digest = sha256_file(layer)
        layer_size = os.path.getsize(layer)
        env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + a.env
        config = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "architecture": "amd64" if os.uname().machine == "x86_64" else os.uname().machine,
            "os": "linux",
            "config": {"Env": env, "WorkingDir": a.workdir,
                       "Labels": dict(kv.split("=", 1) for kv in a.label) or None},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
            "history": [{"created_by": "decor cluster/oci-pack.py"}],
        }
        if json.loads(a.entrypoint) is not None:
            config["config"]["Entrypoint"] = json.loads(a.entrypoint)
        if json.loads(a.cmd) is not None:
            config["config"]["Cmd"] = json.loads(a.cmd)
        if config["config"]["Labels"] is None:
            del config["config"]["Labels"]
        config_b = json.dumps(config, sort_keys=True).encode()
        config_d = hashlib.sha256(config_b).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": f"sha256:{config_d}", "size": len(config_b)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": f"sha256:{layer_digest}", "size": layer_size}],
        }
        manifest_b = json.dumps(manifest, sort_keys=True).encode()
        manifest_d = hashlib.sha256(manifest_b).hexdigest()
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_d}", "size": len(manifest_b),
                "platform": {"architecture": config["architecture"], "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": tag,
                                "io.containerd.image.name": a.name},
            }],
        }
        tmp_out = a.out + ".partial"
        with tarfile.open(tmp_out, "w", format=tarfile.PAX_FORMAT) as t:
            add_bytes(t, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
            add_bytes(t, "index.json", json.dumps(index, sort_keys=True).encode())
            add_dir(t, "blobs")
            add_dir(t, "blobs/sha256")
            add_bytes(t, f"blobs/sha256/{config_d}", config_b)
            add_bytes(t, f"blobs/sha256/{manifest_d}", manifest_b)
            info = t.gettarinfo(layer, arcname=f"blobs/sha256/{layer_digest}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
            with open(layer, "rb") as f:
                t.addfile(info, f)
        os.replace(tmp_out, a.out)
    print(f"oci-pack: {a.name} -> {a.out} (layer {layer_size // (1 << 20)} MiB, "
          f"manifest sha256:{manifest_d[:12]})", file=sys.stderr)


if __name__ == "__main__":
    main()
