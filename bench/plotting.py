"""The one matplotlib set-up of every benchmark report: files only (the Agg backend, no
display), each figure laid out tight, written at the caller's resolution and closed."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported on first use: the pure parts of the
    benchmarks run without matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, dpi: int) -> None:
    """Lay ``fig`` out tight, write it as a PNG to ``path`` at ``dpi`` dots per inch, close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
