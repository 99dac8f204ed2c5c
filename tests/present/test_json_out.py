"""The ``--json`` documents' layout: one JSON document, a line per top-level member and per
object of a list, whatever a host put in its values."""

from __future__ import annotations

import json
import math

import pytest

from ddptui.present.json_out import json_text


def test_each_host_is_a_line_of_its_own_and_the_whole_is_one_document() -> None:
    hosts = [{"name": f"h{n}", "facts": {"pip": {"torch": "2.11.0"}}} for n in range(512)]
    document = {"healthy": True, "hosts": hosts, "findings": [], "elapsed_s": 2.75}

    text = json_text(document)

    assert json.loads(text) == document
    lines = text.splitlines()
    assert lines[:3] == ["{", '  "healthy": true,', '  "hosts": [']
    assert lines[3] == '    {"name": "h0", "facts": {"pip": {"torch": "2.11.0"}}},'
    assert len(lines) == 512 + 7
    assert json.loads(json_text(hosts)) == hosts


def test_a_host_s_newlines_and_controls_stay_escapes_and_nan_is_refused() -> None:
    hostile = {"hosts": [{"detail": "a\nb\x1b]0;owned\x07 ‮"}]}
    text = json_text(hostile)
    assert text.isascii() and text.count("\n") == 5
    assert json.loads(text) == hostile
    with pytest.raises(ValueError):
        json_text({"offset": math.nan})
