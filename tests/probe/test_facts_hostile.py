"""A host's probe output is parsed defensively: garbage is a ProbeError, never a crash."""

from __future__ import annotations

import json
import math

import pytest

from ddptui.probe.facts import NA
from ddptui.probe.parse import MAX_DOCUMENT_CHARS, ProbeError, parse_facts


def document(**changes: object) -> str:
    doc: dict[str, object] = {"probe_version": 1, "time": 1.5e9, **changes}
    return json.dumps(doc)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "[" * 100_000 + "]" * 100_000])
def test_deep_nesting_is_a_probe_error(text: str) -> None:
    with pytest.raises(ProbeError, match="nested too deeply"):
        parse_facts(text)


def test_output_past_the_cap_is_a_probe_error_without_parsing() -> None:
    with pytest.raises(ProbeError, match="more than"):
        parse_facts(" " * (MAX_DOCUMENT_CHARS + 1))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_time_that_is_not_a_finite_number_is_not_available(value: float) -> None:
    facts = parse_facts(document(time=value))
    assert facts.time is NA
    json.dumps(facts.to_json(), allow_nan=False)


def test_an_integer_too_large_for_a_float_is_not_a_time() -> None:
    assert parse_facts(document(time=10**400)).time is NA


def test_the_garbage_quoted_in_the_error_is_safe_to_print() -> None:
    with pytest.raises(ProbeError) as error:
        parse_facts("\x1b]0;owned\x07 not json")
    assert "\x1b" not in str(error.value) and "\\x1b]0;owned\\x07" in str(error.value)
