"""What the adapters share (``proxy.context.adapters``): the text of any content value (marked
blocks standing as their name), a call's arguments as JSON text, an API's function tools as
chat tools, and the refusal naming where a request cannot be read."""

from __future__ import annotations

import pytest

from proxy.context.adapters import AdapterError, arguments_text, content_text, function_tools

MARKED = {"image": "image", "input_file": "file"}


def test_content_text_joins_the_text_and_names_marked_blocks() -> None:
    assert content_text("plain", MARKED) == "plain"
    assert content_text([{"type": "text", "text": "a"}, {"type": "image", "source": {}},
                         {"type": "input_file"}, {"type": ["odd"]}, "stray",
                         {"type": "input_text", "text": "b"}], MARKED) == "a\n[image]\n[file]\nb"
    assert content_text(None, MARKED) == "" and content_text(3, MARKED) == ""


def test_arguments_become_json_text_or_a_refusal_naming_where() -> None:
    assert arguments_text('{"a": 1}', "x") == '{"a": 1}'
    assert arguments_text({"a": [1, 2]}, "x") == '{"a": [1, 2]}'
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(AdapterError) as info:
        arguments_text(deep, "messages[2].content[0].input")
    assert info.value.param == "messages[2].content[0].input"
    assert "nested too deeply" in str(info.value)


def test_function_tools_are_chat_tools_and_others_are_left_out() -> None:
    tools = [{"name": "read", "description": "Read", "input_schema": {"type": "object"}},
             {"type": "web_search_20250305", "name": "web_search"}, "junk"]
    assert function_tools(tools, "input_schema", typed=True) == [{"type": "function",
        "function": {"name": "read", "description": "Read",
                     "parameters": {"type": "object"}}}]
    assert function_tools(tools, "input_schema", typed=False)[1]["function"]["name"] == \
        "web_search"  # type: ignore[index]
    assert function_tools([], "parameters", typed=True) is None
    assert function_tools(None, "parameters", typed=True) is None
