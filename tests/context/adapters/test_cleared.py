"""Cleared tool-call arguments (``proxy.context.adapters.cleared``): a JSON object naming what was
cleared, valid in every API, recognized as cleared, its placeholder text read back."""

from __future__ import annotations

import json

from proxy.context.adapters.cleared import (
    cleared_arguments,
    cleared_text,
    input_placeholder,
    is_cleared,
)


def test_a_cleared_call_names_the_tool_the_tokens_and_the_spill() -> None:
    text = input_placeholder("write_file", 12_345, "abcdef0123456789", 8)
    assert text == "[tool input cleared: 12,345 tokens from write_file; spill abcdef01]"
    args = cleared_arguments(text)
    assert json.loads(args) == {"cleared": text} and is_cleared(args)
    assert cleared_text(args) == text


def test_other_arguments_are_not_cleared() -> None:
    assert not is_cleared('{"path": "a.py"}') and not is_cleared({"cleared": "x"})
    assert not is_cleared('{"cleared": "something else"}')
    assert cleared_text('{"other": 1}') == '{"other": 1}'
