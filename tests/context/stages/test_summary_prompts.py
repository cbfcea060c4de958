"""The pure summary helpers: where a summary cut by length ends."""

from __future__ import annotations

import pytest

from proxy.context.stages.summary import clean_cut


@pytest.mark.parametrize(("text", "cut"), [
    ("One. Two. Thr", "One. Two."),
    ("Line one\nLine two\nhalf a li", "Line one\nLine two"),
    ("Done.", "Done."),
    ("Ends well!", "Ends well!"),
    ("No boundary anywhere in this long text", "No boundary anywhere in this long text"),
    ("A. " + "x" * 100, "A. " + "x" * 100),  # the only boundary is too early: keep it all
])
def test_a_cut_summary_ends_at_a_sentence_or_line(text: str, cut: str) -> None:
    assert clean_cut(text) == cut
