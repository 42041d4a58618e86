"""The docs name only what exists.

Every ``make`` target, ``decor`` / ``kubectl dtj`` subcommand and flag, chart value,
condition and reason, metric name, file path and relative link named in README.md, docs/*.md
and the chart's NOTES.txt is checked against the thing itself: the Makefiles' rules, the
argparse parsers of :mod:`decor.cli` and :mod:`decor.kubectl_dtj`, helm/decor/values.yaml,
the vocabulary constants of the operator, the metrics it registers, and the files on disk.

Extraction rules (kept simple on purpose; each test says which it uses):

* *code* is a fenced block or an inline code span; NOTES.txt is all code. Commands, chart
  values and paths are read from code only, so prose such as "make sure" is never a target.
* a *command* is ``make``, ``decor``, ``kubectl dtj`` or ``kubectl-dtj`` at the start of a code
  line or span (after an optional ``$`` prompt) or after ``&&``, ``;``, ``|``, ``(``; its
  words run to the end of the line, a ``#`` comment or the next ``&&``/``;``/``|``/``>``.
* a *chart value* is ``--set KEY=...`` in code, or an inline span ``KEY``, ``KEY=...`` or
  ``KEY: ...`` whose dotted KEY begins with a top-level key of values.yaml.
* a *condition* is a backticked name right after the word "condition" or right before it
  ("condition `X`", "`X` condition"), or the first column of a table headed ``type``;
  a *reason* is a backticked name right after "reason", the reasons column of that table, or
  the first column of a table headed ``reason``.
* a *metric* is any ``decor_operator_*``, ``decor_job_*`` or trainer ``decor_*`` name.
* a *link* is ``[text](target)`` with a relative target; a *file mention* is a span or word
  naming ``*.md`` or a path under one of the repository's top-level folders.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import yaml
from decor.api import vocabulary
from decor_trainer import contract

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "helm/decor/templates/NOTES.txt"]
)
MAKEFILES = [REPO / "Makefile", REPO / "cluster" / "cluster.mk", REPO / "bench" / "bench.mk"]

# Names the docs use that are legitimately not DECOR's own.
EXTERNAL_CONDITIONS = {
    # Kubernetes' pod conditions of an in-place resize, which the operator reads back
    "PodResizePending",
    "PodResizeInProgress",
}
# Top-level keys of values.yaml that hold Kubernetes objects passed through as they are: a
# span such as `resources.mode` or `securityContext.capabilities.add` names a field of a job
# or a pod, not a chart value.
PASSTHROUGH_VALUES = {"resources", "securityContext", "podSecurityContext"}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# --- extraction --------------------------------------------------------------------------------

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")


@cache
def text_of(path: Path) -> str:
    return path.read_text()


def code_pieces(path: Path) -> list[str]:
    """Fenced blocks line by line, and inline spans (whitespace folded), of one document."""
    text = text_of(path)
    if path.suffix == ".txt":
        return [line for line in text.splitlines() if "{{" not in line]
    pieces: list[str] = []
    for block in _FENCE.findall(text):
        pieces += block.splitlines()
    prose = _FENCE.sub("", text)
    pieces += [" ".join(span.split()) for span in _SPAN.findall(prose)]
    return pieces


def prose_of(path: Path) -> str:
    """The document without its fenced blocks (spans kept, with their backticks)."""
    return _FENCE.sub("", text_of(path))


_COMMAND = re.compile(
    r"(?:^|&&|;|\||\()\s*(?:\$\s+)?(make|decor|kubectl dtj|kubectl-dtj)\s+([^#;&|>]*)"
)


# The usage the two commands' modules print in their docstrings is documentation too.
USAGE_MODULES = [REPO / "operator/decor/cli.py", REPO / "operator/decor/kubectl_dtj.py"]


def usage_lines(path: Path) -> list[str]:
    return (ast.get_docstring(ast.parse(text_of(path))) or "").splitlines()


def commands(program: str) -> Iterator[tuple[str, list[str]]]:
    """(document, words after the program) for every use of ``program`` in code."""
    for path in DOCS + USAGE_MODULES:
        pieces = usage_lines(path) if path.suffix == ".py" else code_pieces(path)
        for piece in pieces:
            for match in _COMMAND.finditer(piece):
                name = "kubectl dtj" if match.group(1) == "kubectl-dtj" else match.group(1)
                if name == program:
                    words = [w.strip("[]()") for w in match.group(2).split()]
                    yield _rel(path), [w for w in words if w and w not in ("|", "...")]


# --- make targets ------------------------------------------------------------------------------


@cache
def make_targets() -> frozenset[str]:
    rule = re.compile(r"^([a-zA-Z0-9_-]+):(?!=)", re.M)
    return frozenset(t for f in MAKEFILES for t in rule.findall(f.read_text()))


def test_every_make_target_named_exists() -> None:
    named = set()
    missing = []
    for doc, words in commands("make"):
        targets = [w for w in words if not w.startswith("-") and "=" not in w]
        for target in targets[:1]:  # `make demo`; `make images REGISTRY=...` names one
            named.add(target)
            if target not in make_targets():
                missing.append(f"{doc}: make {target}")
    assert not missing, missing
    assert {"test", "e2e", "demo"} <= named  # the extraction sees the docs' targets


# --- decor and kubectl dtj ---------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def check_command(parser: argparse.ArgumentParser, doc: str, words: list[str]) -> list[str]:
    """What in one documented command line the parser does not know (subcommand, flags).

    Flags before the subcommand belong to the program, after it to the subcommand."""
    subs = _subparsers(parser)
    problems = []
    sub: argparse.ArgumentParser | None = None
    for word in words:
        if word.startswith("-") and not re.match(r"^-\d", word):  # -5m is a move, not a flag
            flag = word.split("=", 1)[0]
            known = _options(sub if sub is not None else parser)
            if flag not in known:
                where = f"{parser.prog} {sub.prog.split()[-1]}" if sub else parser.prog
                problems.append(f"{doc}: {where} has no option {flag}")
        elif sub is None:
            if word not in subs:
                problems.append(f"{doc}: {parser.prog} has no subcommand {word!r}")
                return problems
            sub = subs[word]
    return problems


def test_every_decor_subcommand_and_flag_named_exists() -> None:
    from decor.cli import build_parser

    parser = build_parser()
    problems = []
    seen = set()
    for doc, words in commands("decor"):
        seen.add(words[0] if words else "")
        problems += check_command(parser, doc, words)
    assert not problems, problems
    assert {"run", "validate", "deadline", "operator"} <= seen


def test_every_kubectl_dtj_subcommand_and_flag_named_exists() -> None:
    from decor.kubectl_dtj import build_parser

    parser = build_parser()
    problems = []
    seen = set()
    for doc, words in commands("kubectl dtj"):
        seen.add(words[0] if words else "")
        problems += check_command(parser, doc, words)
    assert not problems, problems
    assert {"get", "deadline"} <= seen


def test_the_command_check_finds_mistakes() -> None:
    from decor.cli import build_parser

    parser = build_parser()
    assert check_command(parser, "d", ["run", "a.yaml", "--local", "--out", "x"]) == []
    assert check_command(parser, "d", ["validate", "--strict"]) == [
        "d: decor validate has no option --strict"
    ]
    assert check_command(parser, "d", ["start", "a.yaml"]) == ["d: decor has no subcommand 'start'"]


# --- chart values ------------------------------------------------------------------------------


@cache
def chart_values() -> dict:
    return yaml.safe_load((REPO / "helm/decor/values.yaml").read_text())


def value_exists(key: str) -> bool:
    """KEY names a value of values.yaml, or a key inside a free-form map that is empty there
    (e.g. monitoring.labels.release)."""
    node: object = chart_values()
    for part in key.split("."):
        if node == {}:
            return True
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


_SET = re.compile(r"--set(?:-string|-json)?[ =]([A-Za-z0-9_.]+)=")
_VALUE_SPAN = re.compile(r"^([a-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)+)(?:=.*|: .*)?$")


_NOT_VALUE = re.compile(r"\.(log|png|json|ya?ml|md|py|txt|sh|com|io|dev|org)$")  # files, API groups


def chart_value_names() -> Iterator[tuple[str, str]]:
    tops = {k for k, v in chart_values().items() if isinstance(v, dict)} - PASSTHROUGH_VALUES
    for path in DOCS:
        for piece in code_pieces(path):
            for key in _SET.findall(piece):
                yield _rel(path), key
            match = _VALUE_SPAN.match(piece.strip())
            if match and match.group(1).split(".")[0] in tops:
                if not _NOT_VALUE.search(match.group(1)):
                    yield _rel(path), match.group(1)


def test_every_chart_value_named_exists() -> None:
    named = list(chart_value_names())
    missing = [f"{doc}: {key}" for doc, key in named if not value_exists(key)]
    assert not missing, missing
    assert len(named) > 20  # the extraction sees the docs' values


# --- conditions and reasons --------------------------------------------------------------------


@cache
def documented_vocabulary() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(condition types, condition reasons, event reasons), from the operator's vocabulary."""

    def constants(prefix: str) -> set[str]:
        return {
            value
            for name, value in vars(vocabulary).items()
            if name.startswith(prefix) and isinstance(value, str)
        }

    conditions = frozenset(vocabulary.CONDITION_TYPES)
    reasons = frozenset(constants("REASON_") | constants("VERDICT_"))  # verdicts: Admitted's
    events = frozenset(
        (constants("EVENT_") - {vocabulary.EVENT_NORMAL, vocabulary.EVENT_WARNING})
        | {vocabulary.REASON_TEMPLATE_REFUSED, vocabulary.REASON_CREATE_REFUSED}
    )
    return conditions, reasons, events


_NAME = r"`([A-Z][A-Za-z]+)`"


def _tables(text: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    """Markdown tables as (header cells, rows of cells)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip("|").split("|")])
                i += 1
            yield header, rows
        else:
            i += 1


def named_conditions_and_reasons() -> Iterator[tuple[str, str, str]]:
    """(document, "condition" | "reason" | "event", name)."""
    for path in DOCS:
        prose = prose_of(path)
        doc = _rel(path)
        for name in re.findall(r"\bconditions? " + _NAME, prose):
            yield doc, "condition", name
        for name in re.findall(_NAME + r" conditions?\b", prose):
            yield doc, "condition", name
        for name in re.findall(r"\breasons? " + _NAME, prose):
            yield doc, "reason", name
        for header, rows in _tables(prose):
            if header[:1] == ["type"] and "reasons" in header:
                column = header.index("reasons")
                for row in rows:
                    yield from ((doc, "condition", n) for n in re.findall(_NAME, row[0]))
                    yield from ((doc, "reason", n) for n in re.findall(_NAME, row[column]))
            if header[:2] == ["reason", "type"]:
                for row in rows:
                    yield from ((doc, "event", n) for n in re.findall(_NAME, row[0]))


def test_every_condition_and_reason_named_exists() -> None:
    conditions, reasons, events = documented_vocabulary()
    known = {
        "condition": conditions | EXTERNAL_CONDITIONS,
        "reason": reasons | events,
        "event": events,
    }
    named = list(named_conditions_and_reasons())
    wrong = [f"{doc}: {kind} {name}" for doc, kind, name in named if name not in known[kind]]
    assert not wrong, wrong
    kinds = {kind for _, kind, _ in named}
    assert kinds == {"condition", "reason", "event"}


def test_every_condition_type_is_documented() -> None:
    conditions, _, _ = documented_vocabulary()
    documented = {n for _, kind, n in named_conditions_and_reasons() if kind == "condition"}
    assert conditions <= documented, sorted(conditions - documented)


# --- metrics -----------------------------------------------------------------------------------


@cache
def operator_metric_names() -> frozenset[str]:
    """Every sample name the operator exposes, from a fresh registry."""
    from decor.service.operator_metrics import OperatorMetrics
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    OperatorMetrics(registry)
    names = set()
    for family in registry.collect():
        names.add(family.name)
        names |= {sample.name for sample in family.samples}
    return frozenset(names)


@cache
def other_metric_names() -> frozenset[str]:
    """The trainers' metrics (decor_trainer.contract) and the kube-state-metrics series of
    helm/decor/files/kube-state-metrics-decor.yaml (decor_job_*)."""
    counters = {contract.STEPS_COMPLETED, contract.SAMPLES_COMPLETED}
    names = {v for v in vars(contract).values() if isinstance(v, str) and v.startswith("decor_")}
    names |= {c + "_total" for c in counters}
    config = yaml.safe_load((REPO / "helm/decor/files/kube-state-metrics-decor.yaml").read_text())
    for resource in config["spec"]["resources"]:
        prefix = resource["metricNamePrefix"]
        names |= {f"{prefix}_{m['name']}" for m in resource["metrics"]}
    return frozenset(names)


_METRIC = re.compile(
    r"\b(decor_(?:operator|job|steps|samples|epochs?|step|last|training)_[a-z_]*[a-z])"
)


def test_every_metric_named_exists() -> None:
    known = operator_metric_names() | other_metric_names()
    wrong = [
        f"{_rel(path)}: {name}"
        for path in DOCS
        for name in sorted(set(_METRIC.findall(text_of(path))))
        if name not in known
    ]
    assert not wrong, wrong


def test_every_operator_metric_and_actuation_kind_is_documented() -> None:

    operations = text_of(REPO / "docs" / "operations.md")
    table = {
        re.sub(r"`", "", row[0]): row
        for header, rows in _tables(operations)
        if header[:1] == ["metric"]
        for row in rows
    }
    exposed = {n.removesuffix("_total") for n in operator_metric_names()}
    families = {n for n in exposed if not n.endswith(("_bucket", "_sum", "_count", "_created"))}
    documented = {n.removesuffix("_total") for n in table}
    assert families <= documented, sorted(families - documented)
    actuations = table["decor_operator_actuations_total"][2]
    assert all(kind in actuations for kind in vocabulary.ACTUATIONS), (
        actuations,
        vocabulary.ACTUATIONS,
    )


# --- the operator's environment --------------------------------------------------------------


def operator_variables() -> set[str]:
    """Every ``DECOR_*`` variable the operator reads (the ENV_ constants of its config)."""
    from decor.core import policy
    from decor.service import config

    return {
        value
        for module in (config, policy)
        for name, value in vars(module).items()
        if name.startswith("ENV_") and isinstance(value, str) and value.startswith("DECOR_")
    }


def test_every_operator_variable_is_in_the_configuration_table() -> None:
    operations = text_of(REPO / "docs" / "operations.md")
    table = " ".join(
        row[0] for header, rows in _tables(operations) if header[:1] == ["variable"] for row in rows
    )
    documented = set(re.findall(r"`(DECOR_[A-Z_]+)`", table))
    assert operator_variables() <= documented, sorted(operator_variables() - documented)
    assert documented <= operator_variables(), sorted(documented - operator_variables())


# --- links and files ---------------------------------------------------------------------------


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    headings = re.findall(r"^#+\s+(.*)$", _FENCE.sub("", text_of(path)), re.M)
    return frozenset(_anchor(h) for h in headings)


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_TOP = (
    "operator",
    "trainer_image",
    "crds",
    "helm",
    "cluster",
    "tests",
    "docs",
    "examples",
    "hack",
    "bench",
)
_PATH = re.compile(r"^(?:\./)?((?:" + "|".join(_TOP) + r")/[A-Za-z0-9_./-]*)$")
_MD = re.compile(r"(?<![\w/.-])([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md)\b")


def _exists(base: Path, target: str) -> bool:
    return (base / target).exists() or (REPO / target).exists()


def test_every_relative_link_resolves() -> None:
    broken = []
    for path in DOCS:
        for target in _LINK.findall(prose_of(path)):
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{_rel(path)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{_rel(path)}: {target} (no such heading)")
    assert not broken, broken


def test_every_file_named_exists() -> None:
    missing = []
    for path in DOCS:
        prose = _LINK.sub("", prose_of(path))  # links are the test above's
        named = {m for m in _MD.findall(prose) if "://" not in m}
        for piece in code_pieces(path):
            match = _PATH.match(piece.strip())
            if match and not re.search(r"[A-Z]{2,}|\*|\.\.\.|<", match.group(1)):
                named.add(match.group(1).rstrip("/"))
        missing += [f"{_rel(path)}: {n}" for n in sorted(named) if not _exists(path.parent, n)]
    assert not missing, missing
