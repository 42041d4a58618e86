"""The namespaces the operator serves: ``DECOR_WATCH_NAMESPACES`` and ``decor operator
--namespace`` (repeatable), parsed and checked before anything is served."""

from __future__ import annotations

import pytest
from decor.cli import build_parser
from decor.service.config import ENV_WATCH_NAMESPACES, parse_watch_namespaces, watch_namespaces


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, ()),
        ("", ()),
        (" , ,", ()),
        ("ml", ("ml",)),
        ("ml,ml-dev,team-a", ("ml", "ml-dev", "team-a")),
        ("  ml ,\tml-dev  ", ("ml", "ml-dev")),
        ("ml,ml-dev,ml", ("ml", "ml-dev")),  # each once, in the order given
        ("a" * 63, ("a" * 63,)),
    ],
)
def test_a_comma_separated_list_is_parsed(text: str | None, expected: tuple[str, ...]) -> None:
    assert parse_watch_namespaces(text) == expected


@pytest.mark.parametrize(
    "bad", ["ML", "ml_dev", "ml.dev", "-ml", "ml-", "ml-*", "!kube-system", "a" * 64, "m l"]
)
def test_a_name_that_is_not_a_namespace_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a namespace name") as raised:
        parse_watch_namespaces(f"ok,{bad}")
    assert repr(bad.strip()) in str(raised.value)


def test_the_command_line_wins_over_the_environment() -> None:
    env = {ENV_WATCH_NAMESPACES: "from-env, other"}
    assert watch_namespaces(None, env) == ("from-env", "other")
    assert watch_namespaces([], env) == ("from-env", "other")
    assert watch_namespaces(["ml", "ml-dev"], env) == ("ml", "ml-dev")
    assert watch_namespaces(None, {}) == ()  # all namespaces
    with pytest.raises(ValueError, match="'Bad' is not a namespace name"):
        watch_namespaces(["ml", "Bad"], env)


def test_decor_operator_takes_namespace_again_and_again() -> None:
    parser = build_parser()
    args = parser.parse_args(["operator", "--namespace", "ml", "--namespace", "ml-dev"])
    assert args.namespace == ["ml", "ml-dev"]
    assert parser.parse_args(["operator"]).namespace is None


def test_decor_operator_refuses_a_bad_namespace_before_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from decor.cli import main

    assert main(["operator", "--namespace", "ml", "--namespace", "ML"]) == 2
    assert "decor: 'ML' is not a namespace name" in capsys.readouterr().err
