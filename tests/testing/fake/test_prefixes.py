"""A replayed block's or item's prefix (``proxy.testing.fake.prefixes``) is read canonically:
the spellings the APIs treat as one are one, any other change is a change."""

from __future__ import annotations

from typing import Any

from proxy.testing.fake.prefixes import blocks, canonical, item_prefix, items_of, prefix_of

TEXT = {"type": "text", "text": "read a.txt"}


def messages_body(first: Any, system: Any = "Be brief.", **extra: Any) -> dict[str, Any]:
    return {"system": system, "tools": [{"name": "read_file"}], **extra,
            "messages": [{"role": "user", "content": first},
                         {"role": "assistant", "content": [{"type": "thinking"}]}]}


def test_a_string_content_reads_as_one_text_block_and_markers_are_left_aside() -> None:
    plain = prefix_of(messages_body("read a.txt"), 1, 0)
    assert prefix_of(messages_body([TEXT]), 1, 0) == plain
    marked = [dict(TEXT, cache_control={"type": "ephemeral"})]
    assert prefix_of(messages_body(marked, system=[{"type": "text", "text": "Be brief.",
                                                    "cache_control": {"type": "ephemeral"}}]),
                     1, 0) == plain
    assert prefix_of(messages_body("read b.txt"), 1, 0) != plain
    assert prefix_of(messages_body("read a.txt", system="Be kind."), 1, 0)[0] != plain[0]
    assert canonical([{"type": "tool_result", "content": "ok"}]) == [
        {"type": "tool_result", "content": [{"type": "text", "text": "ok"}]}]
    assert blocks({"content": "hi"}) == [{"type": "text", "text": "hi"}]


def test_a_later_block_of_the_same_message_has_the_earlier_ones_in_its_prefix() -> None:
    body = messages_body("go")
    body["messages"][1]["content"] = [{"type": "thinking", "thinking": "a"},
                                      {"type": "text", "text": "b"}]
    assert prefix_of(body, 1, 0) != prefix_of(body, 1, 1)
    assert prefix_of(body, 2, 0) != prefix_of(body, 1, 1)  # the answer's: the whole list


def test_responses_items_read_canonically() -> None:
    as_text = {"instructions": "Be brief.", "input": "hi"}
    as_part = {"instructions": "Be brief.", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}
    assert item_prefix(as_text, 1) == item_prefix(as_part, 1)
    assert items_of(as_text) == [{"role": "user", "content": "hi"}]
    reply = {"role": "assistant", "content": "ok"}
    parts = {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "ok"}]}
    assert item_prefix({"input": ["x", reply]}, 2) == item_prefix({"input": ["x", parts]}, 2)
    assert item_prefix(as_text, 1) != item_prefix(dict(as_text, instructions="Be kind."), 1)
    assert item_prefix(as_text, 1) != item_prefix(dict(as_text, tools=[{"name": "f"}]), 1)
    assert item_prefix(as_text, 0) != item_prefix(as_text, 1)
    with_id = {"input": [dict(parts, id="msg_1")]}
    assert item_prefix(with_id, 1) != item_prefix({"input": [parts]}, 1)  # nothing else ignored
