"""The counting formula (``proxy.context.tokens.formula``): which encoding counts a model, a
message's tokens (per message, name, calls; call ids never rendered), images and audio at
their flat rates, and the keys a count is cached under (blind to key order, to call ids)."""

from __future__ import annotations

import tiktoken

from proxy.context.tokens.formula import (
    AUDIO_TOKENS,
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    PER_MESSAGE,
    PER_NAME,
    PER_TOOL_CALL,
    approx_chars,
    cache_key,
    count_text,
    encode_message,
    encoding_name_for,
    fingerprint,
)

ENC = tiktoken.get_encoding("o200k_base")


def test_each_model_has_its_encoding() -> None:
    assert encoding_name_for("gpt-4o-mini") == "o200k_base"
    assert encoding_name_for("openai/GPT-4.1") == "o200k_base"
    assert encoding_name_for("o3-mini") == "o200k_base"
    assert encoding_name_for("gpt-3.5-turbo") == "cl100k_base"
    assert encoding_name_for("my-llama") == "cl100k_base"  # the default
    assert encoding_name_for("davinci") == "p50k_base"  # r50k's files are not shipped


def test_a_message_costs_its_content_name_and_calls() -> None:
    text = count_text(ENC, "hello world")
    assert encode_message(ENC, {"role": "user", "content": "hello world"}) == (
        PER_MESSAGE + text + count_text(ENC, "user"), text)
    named = encode_message(ENC, {"role": "user", "content": "hello world", "name": "bob"})
    assert named[0] == PER_MESSAGE + text + count_text(ENC, "user") + count_text(
        ENC, "bob") + PER_NAME
    call = {"id": "call_ignored", "function": {"name": "grep", "arguments": '{"p": "x"}'}}
    with_call = encode_message(ENC, {"role": "assistant", "content": None, "tool_calls": [call]})
    assert with_call == (PER_MESSAGE + count_text(ENC, "assistant") + PER_TOOL_CALL +
                         count_text(ENC, "grep") + count_text(ENC, '{"p": "x"}'), 0)
    result = encode_message(ENC, {"role": "tool", "tool_call_id": "c" * 500, "content": "ok"})
    assert result[0] == PER_MESSAGE + count_text(ENC, "tool") + count_text(ENC, "ok")


def test_images_and_audio_count_at_flat_rates() -> None:
    _, content = encode_message(ENC, {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:...", "detail": "low"}},
        {"type": "input_image", "image_url": "x"}, {"type": "input_audio"}]})
    assert content == IMAGE_TOKENS_LOW + IMAGE_TOKENS + AUDIO_TOKENS


def test_cache_keys_ignore_key_order_and_call_ids_and_fingerprints_differ_by_content() -> None:
    a = {"role": "tool", "tool_call_id": "c1", "content": "out"}
    b = {"content": "out", "tool_call_id": "c2", "role": "tool"}
    assert cache_key(a) == cache_key(b)
    assert cache_key(a) != cache_key({**a, "content": "other"})
    assert fingerprint({"role": "user", "content": "x"}) == fingerprint(
        {"content": "x", "role": "user"})
    assert fingerprint({"role": "user", "content": "x"}) != fingerprint(
        {"role": "user", "content": "y"})
    assert len(fingerprint(a)) == 16


def test_approximate_characters_count_text_parts_and_arguments() -> None:
    messages = [{"role": "user", "content": "abc"},
                {"role": "user", "content": [{"type": "text", "text": "de"}, "junk"]},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"function": {"name": "f", "arguments": "xyz1"}}]}]
    assert approx_chars(messages) == 3 + 2 + 4
