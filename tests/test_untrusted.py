"""The one sanitiser for remote text: nothing a host sends reaches a terminal live."""

from __future__ import annotations

import io
import re

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from ddptui.untrusted import ELLIPSIS, plain, plain_bytes

# What a terminal would act on: C0 controls (ESC among them), DEL, C1 controls (CSI 0x9b,
# OSC 0x9d, ST 0x9c), and the bidi controls that reorder the displayed line.
LIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
LIVE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")

hostile = st.text(
    alphabet=st.one_of(
        st.characters(),  # every code point, lone surrogates included
        st.sampled_from(["\x1b", "\x9b", "\x9d", "\x07", "\r", "\n", "\t", "\u202e", "[", "]"]),
    ),
    max_size=200,
)


@given(hostile)
def test_output_has_no_live_control_and_prints_in_utf8(text: str) -> None:
    shown = plain(text)
    assert not LIVE.search(shown)
    shown.encode("utf-8")  # no lone surrogate left to make print() raise


@given(hostile)
def test_one_line_output_has_no_control_at_all(text: str) -> None:
    shown = plain(text, one_line=True)
    assert not LIVE.search(shown) and not LIVE_ONE_LINE.search(shown)
    assert "\n" not in shown and "\t" not in shown


@given(hostile)
def test_safe_text_is_kept_as_is(text: str) -> None:
    safe = LIVE.sub("", text).translate({0x2028: None, 0x2029: None})
    safe = "".join(char for char in safe if not 0xD800 <= ord(char) <= 0xDFFF)
    assert plain(safe) == safe


@given(st.binary(max_size=300))
def test_bytes_never_raise_and_are_as_safe(data: bytes) -> None:
    shown = plain_bytes(data, one_line=True)
    assert not LIVE.search(shown) and "\n" not in shown
    assert b"\x1b" not in shown.encode("utf-8")


@given(hostile, st.integers(min_value=1, max_value=50))
def test_a_limit_holds_on_what_is_shown(text: str, limit: int) -> None:
    shown, whole = plain(text, limit=limit), plain(text)
    assert len(shown) <= limit
    if len(whole) <= limit:
        assert shown == whole
    else:
        assert shown.endswith(ELLIPSIS) and whole.startswith(shown[:-1])


def test_escapes_are_visible_not_removed() -> None:
    title = "\x1b]0;owned\x07"
    clipboard = "\x1b]52;c;cm0gLXJmIH4=\x07"
    assert plain(title) == "\\x1b]0;owned\\x07"
    assert plain(clipboard).startswith("\\x1b]52;")
    assert plain("\x9b2J") == "\\x9b2J"
    assert plain("evil\u202etxt.exe") == "evil\\u202etxt.exe"
    assert plain("\ud800") == "\\ud800"
    assert plain("a\r\nb") == "a\\x0d\nb"
    assert plain("a\tb\nc", one_line=True) == "a\\tb\\nc"
    assert plain("a\tb\nc") == "a\tb\nc"


def test_invalid_utf8_is_replaced() -> None:
    assert plain_bytes(b"ok \xff\x1b[2J") == "ok \ufffd\\x1b[2J"


def test_rich_shows_markup_and_escapes_literally() -> None:
    # The contract for callers: plain() into a Text, never into a markup string.
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    console.print(Text(plain("[/] [link=https://x.example]click[/link] \x1b]52;c;AA\x07")))
    printed = out.getvalue()
    assert "[/] [link=https://x.example]click[/link] \\x1b]52;c;AA\\x07" in printed
    assert "\x1b]8;" not in printed and "\x1b]52" not in printed


def test_what_terminals_count_cells_for_differently_is_shown_as_nothing() -> None:
    # gloo's "GLHF! 🏖️": with its presentation selector, one cell in tmux and two in Textual.
    assert plain("GLHF! \U0001f3d6\ufe0f") == "GLHF! \U0001f3d6"
    assert plain("\U0001f469\u200d\U0001f4bb", limit=5) == "\U0001f469\U0001f4bb"
    assert plain("\ufe0e\ufe0f\u200d", one_line=True) == ""
