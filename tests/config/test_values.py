"""Command-line and environment values are typed as YAML 1.2 would type them, predictably."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc_runner.config.values import format_value, parse_value
from hpc_runner.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        ("-1", -1),
        ("1e-4", 1e-4),
        ("0.5", 0.5),
        ("true", True),
        ("False", False),
        ("null", None),
        ("~", None),
        ("[8,16]", [8, 16]),
        ("[8, 16, 32]", [8, 16, 32]),
        ("{a: 1}", {"a": 1}),
        ("'42'", "42"),
        ('"true"', "true"),
        ("yes", "yes"),  # YAML 1.1's Norway problem is not ours
        ("on", "on"),
        ("1_000", "1_000"),
        ("a#b", "a#b"),  # MONAI's Fire parsing drops '#b'
        ("hello #1", "hello #1"),
        ("$@network.parameters()", "$@network.parameters()"),
        ("@network_def", "@network_def"),
        ("%configs/a.json::net", "%configs/a.json::net"),
        ("", ""),
    ],
)
def test_values_are_typed_like_yaml_1_2(text: str, expected: object) -> None:
    assert parse_value(text) == expected
    assert type(parse_value(text)) is type(expected)


def test_special_floats_parse() -> None:
    assert parse_value(".inf") == math.inf
    assert math.isnan(parse_value(".nan"))


def test_unclosed_flow_list_is_an_error_that_says_how_to_quote() -> None:
    with pytest.raises(ConfigError) as err:
        parse_value("[1, 2", what="value of --x")
    assert "value of --x" in str(err.value)
    assert "Quote the whole value" in str(err.value)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=True, width=64)
    | st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20)
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd")), min_size=1, max_size=8),
                      children, max_size=4),
    max_leaves=12,
)


@given(values)
def test_format_then_parse_gives_the_value_back(value: object) -> None:
    assert parse_value(format_value(value)) == value


@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30))
def test_any_text_parses_without_crashing_and_strings_are_kept_verbatim(text: str) -> None:
    try:
        value = parse_value(text)
    except ConfigError:
        assert text.strip()[:1] in "[{'\""
        return
    if isinstance(value, str) and not (len(text.strip()) >= 2 and text.strip()[0] in "'\""):
        assert value == text
