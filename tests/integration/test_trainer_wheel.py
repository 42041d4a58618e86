"""The decor-trainer wheel as a user installs it (docs/contract.md#install).

The wheel is built from this repository with ``hack/trainer-wheel.sh`` (what
``cluster/build-images.sh`` puts into the trainer image) and installed with ``pip install``
into a fresh virtual environment of the base interpreter: Python and the system's PyTorch
(``hack/venv.sh`` takes PyTorch from there), nothing of this repository and nothing of the
project's environment. There a plain training loop (``examples/own-loop/train.py``) writes its
progress file, the wheel's sidecar serves it, and the operator's own reader
(:func:`decor.adapter.scrape.scrape_progress`) reads the progress back.

The test runs offline: prometheus-client, the wheel's one dependency, is copied from this
environment into the fresh one in place of PyPI, and ``pip install --no-index`` then makes
pip's resolver show that the wheel needs nothing else.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from decor.adapter import scrape
from decor.core import progress

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0
EPOCHS, SAMPLES, BATCH = 2, 64, 16  # 4 steps per epoch, 8 in all
STEPS = EPOCHS * (SAMPLES // BATCH)
SETUPTOOLS_MIN = 77  # trainer_image/pyproject.toml's build requirement


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Python's search paths (the tree's sources are on
    PYTHONPATH here) or the contract's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DECOR_"))}
    return {**env, "PYTHONNOUSERSITE": "1", **extra}


def run(
    command: list[str], env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` to its end (TIMEOUT_S at most); fails the test, with its output, unless 0."""
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, f"{command} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built offline by this environment's pip and setuptools."""
    setuptools = importlib.metadata.version("setuptools")
    assert int(setuptools.split(".")[0]) >= SETUPTOOLS_MIN, (
        f"setuptools {setuptools} cannot build decor-trainer offline: the dev extra asks for"
        f" >= {SETUPTOOLS_MIN} (rerun hack/venv.sh)"
    )
    out = tmp_path_factory.mktemp("dist")
    script = str(ROOT / "hack" / "trainer-wheel.sh")
    done = run(
        ["bash", script, str(out), "--no-build-isolation"],
        env={**os.environ, "PYTHON": sys.executable},
    )
    return Path(done.stdout.strip())


def test_the_wheel_holds_decor_trainer_alone(wheel: Path) -> None:
    version = project_version()
    assert wheel.name == f"decor_trainer-{version}-py3-none-any.whl"
    dist_info = f"decor_trainer-{version}.dist-info/"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        meta = Parser().parsestr(archive.read(dist_info + "METADATA").decode())
    package = ROOT / "trainer_image"
    sources = {p.relative_to(package).as_posix() for p in (package / "decor_trainer").rglob("*.py")}
    assert {n for n in names if not n.startswith(dist_info)} == sources
    assert (meta["Name"], meta["Version"]) == ("decor-trainer", version)
    # No operator dependency (kopf, kubernetes, decor, ...) and no PyTorch: the image has its own.
    assert meta.get_all("Requires-Dist") == ["prometheus-client>=0.16"]


def fresh_environment(where: Path) -> Path:
    """A virtual environment of the base interpreter that sees the system's packages
    (PyTorch) and none of the project's environment; returns its python."""
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix) / "bin" / minor
    run(
        [str(base), "-m", "venv", "--system-site-packages", "--without-pip", str(where)],
        env=clean_env(),
    )
    return where / "bin" / "python"


def copy_distribution(name: str, site: Path) -> None:
    """Copy the installed distribution ``name`` (its packages and metadata) into ``site``."""
    dist = importlib.metadata.distribution(name)
    for top in {Path(str(f)).parts[0] for f in dist.files or []} - {".."}:
        source = Path(str(dist.locate_file(top)))
        if source.is_dir():
            shutil.copytree(source, site / top, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, site / top)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_until_served(url: str, sidecar: subprocess.Popen[str]) -> progress.Progress:
    """The operator's read of ``url``, repeated until the sidecar answers (TIMEOUT_S at most)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            return scrape.scrape_progress(url)
        except progress.MetricsError as exc:
            if sidecar.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the sidecar never served {url}: {exc}")
            time.sleep(0.05)


def test_a_fresh_environment_reports_progress_the_operator_reads(
    wheel: Path, tmp_path: Path
) -> None:
    python = fresh_environment(tmp_path / "env")
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(run([str(python), "-I", "-c", where], env=clean_env()).stdout.strip())
    copy_distribution("prometheus-client", site)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    run(
        [*pip, "install", "--no-index", "--no-cache-dir", str(wheel)], env=clean_env(), cwd=tmp_path
    )

    probe = "import decor_trainer, importlib.util as u, torch; print(decor_trainer.__file__, u.find_spec('decor'))"
    package, operator = run(
        [str(python), "-I", "-c", probe], env=clean_env(), cwd=tmp_path
    ).stdout.split()
    assert Path(package).is_relative_to(site) and operator == "None"  # the wheel's, no operator

    run_dir = tmp_path / "run"  # the pod's shared emptyDir
    run_dir.mkdir()
    progress_file = run_dir / "progress.json"
    loop_env = clean_env(
        DECOR_EPOCHS=str(EPOCHS), DECOR_PROGRESS_FILE=str(progress_file),
        DECOR_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
    )  # fmt: skip
    example = str(ROOT / "examples" / "own-loop" / "train.py")
    size = ["--samples", str(SAMPLES), "--batch-size", str(BATCH), "--hidden", "16"]
    started_s = time.time()
    loop = run([str(python), "-I", example, *size, "--log-every", "0"], env=loop_env, cwd=tmp_path)
    assert f"finished: {STEPS}/{STEPS} steps, {STEPS * BATCH} samples" in loop.stdout

    port = free_port()
    command = [str(python), "-I", "-m", "decor_trainer.sidecar", "--file", str(progress_file)]
    command += ["--port", str(port), "--address", "127.0.0.1"]
    with (tmp_path / "sidecar.log").open("w") as log:
        sidecar = subprocess.Popen(
            command, env=clean_env(), cwd=tmp_path, stdout=log, stderr=log, text=True
        )
        try:
            progress = read_until_served(f"http://127.0.0.1:{port}/metrics", sidecar)
        finally:
            sidecar.send_signal(signal.SIGTERM)
            rc = sidecar.wait(timeout=TIMEOUT_S)
    assert (progress.steps_done, progress.steps_planned, progress.epochs_done) == (
        STEPS,
        STEPS,
        EPOCHS,
    )
    assert (
        progress.last_step_time_s is not None
        and started_s < progress.last_step_time_s < time.time()
    )
    assert rc == 0, (tmp_path / "sidecar.log").read_text()
