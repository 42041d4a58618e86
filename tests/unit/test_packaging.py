"""The two distributions: ``decor`` (operator/) and ``decor-trainer`` (trainer_image/).

They are released together at one version, ``decor`` depends on exactly that
``decor-trainer``, and ``decor-trainer`` declares what its modules import at module level
beyond the standard library, except PyTorch (the training image brings its own).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "trainer_image" / "decor_trainer"
BROUGHT_BY_THE_IMAGE = {"torch"}
IMPORT_NAMES = {"prometheus-client": "prometheus_client"}  # distribution -> top-level module


def project(path: Path) -> dict[str, Any]:
    """The ``[project]`` table of the pyproject.toml at ``path``."""
    data: dict[str, Any] = tomllib.loads(path.read_text())["project"]
    return data


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def module_level_imports(path: Path) -> set[str]:
    """Top-level modules imported unconditionally when ``path`` is imported: statements of the
    module's body, not those inside functions, ``try`` (optional imports) or ``if``
    (``TYPE_CHECKING``); relative imports left out."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_both_distributions_have_one_version_and_decor_needs_exactly_that_trainer() -> None:
    decor, trainer = (
        project(REPO / "pyproject.toml"),
        project(REPO / "trainer_image/pyproject.toml"),
    )
    assert (decor["name"], trainer["name"]) == ("decor", "decor-trainer")
    assert trainer["version"] == decor["version"]
    assert f"decor-trainer=={decor['version']}" in decor["dependencies"]


def test_the_trainer_declares_what_its_modules_import() -> None:
    third_party = set().union(*(module_level_imports(p) for p in PACKAGE.glob("*.py")))
    third_party -= set(sys.stdlib_module_names) | {"__future__", "decor_trainer"}
    declared = {
        requirement_name(r) for r in project(REPO / "trainer_image/pyproject.toml")["dependencies"]
    }
    assert {IMPORT_NAMES.get(name, name) for name in declared} == third_party - BROUGHT_BY_THE_IMAGE
    assert BROUGHT_BY_THE_IMAGE <= third_party  # still imported, and still not declared
