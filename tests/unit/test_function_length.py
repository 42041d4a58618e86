"""No function or method longer than 60 lines (its ``def`` line to its last, docstring
included, decorators not) in the operator, the trainer and the benchmarks: a longer one is
split into named steps (docs/architecture.md). The benchmarks' drivers of live runs named in
``NOT_YET_SPLIT`` are the only exceptions; the list may only shrink."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 60
HELD = {
    "operator": sorted((REPO / "operator" / "decor").rglob("*.py")),
    "trainer": sorted((REPO / "trainer_image" / "decor_trainer").rglob("*.py")),
    "bench": sorted((REPO / "bench").rglob("*.py")),
}
NOT_YET_SPLIT = {
    "bench/harness.py": ["run_grid", "execute", "execute_k8s"],
    "bench/k8s_bench.py": ["run_job"],
    "bench/scale/bench_scale.py": ["schedule_patches"],
}
"""Functions that drive live benchmark runs (processes, cgroups, a cluster) and are still
longer: each must still be over the limit (split, it leaves this list)."""


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name:line (N lines)`` of every function in ``path``, nested ones too, over ``limit``
    lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append(f"{node.name}:{node.lineno} ({lines} lines)")
    return found


def names(found: list[str]) -> list[str]:
    """The function names of :func:`long_functions`' entries, sorted."""
    return sorted(entry.split(":")[0] for entry in found)


@pytest.mark.parametrize("part", sorted(HELD))
def test_no_function_is_longer_than_the_limit(part: str) -> None:
    assert HELD[part], f"no Python files found for {part}"
    too_long = {}
    for path in HELD[part]:
        name = str(path.relative_to(REPO))
        found = long_functions(path)
        if found and names(found) != sorted(NOT_YET_SPLIT.get(name, [])):
            too_long[name] = found
    assert too_long == {}


def test_every_function_not_yet_split_is_still_long() -> None:
    for name, functions in NOT_YET_SPLIT.items():
        assert names(long_functions(REPO / name)) == sorted(functions), name


def test_the_count_takes_a_function_from_its_def_to_its_last_line(tmp_path: Path) -> None:
    def function(indent: str, name: str, statements: int) -> list[str]:
        body = [f"{indent}    x{i} = {i}" for i in range(statements)]
        return [f"{indent}def {name}():", f'{indent}    """doc"""', *body]

    fits = function("", "fits", MAX_FUNCTION_LINES - 2)  # def, docstring and 58 lines: 60
    over = function("    ", "method", MAX_FUNCTION_LINES - 1)
    source = tmp_path / "m.py"
    source.write_text("\n".join(["@decorated", *fits, "", "", "class C:", *over, ""]))
    assert long_functions(source) == [f"method:{len(fits) + 5} (61 lines)"]
