"""What every managed API shares (``proxy.apis.api``): the checks of every body, the OpenAI way
of sending the key, the fields a summary call repeats, and reading an integer out of usage."""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.apis.api import check_common, first_int, openai_headers, summary_fields
from proxy.errors import ApiError


def test_first_int_reads_the_first_match_or_zero() -> None:
    pattern = re.compile(rb'"n"\s*:\s*([0-9]+)')
    assert first_int(pattern, b'{"n": 12, "m": {"n": 3}}') == 12
    assert first_int(pattern, b'{"m": 1}') == 0


@pytest.mark.parametrize(("body", "param"), [
    ({}, "model"), ({"model": ""}, "model"), ({"model": 3}, "model"),
    ({"model": "m", "stream": "yes"}, "stream"), ({"model": "m", "tools": {}}, "tools")])
def test_every_body_needs_a_model_a_boolean_stream_and_a_tools_list(
        body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as info:
        check_common(body)
    assert (info.value.status, info.value.param) == (400, param)


def test_a_good_body_passes() -> None:
    check_common({"model": "m", "stream": None, "tools": []})
    check_common({"model": "m", "stream": True})


def test_openai_headers_carry_the_key_as_a_bearer_token_and_ask_for_plain_bodies() -> None:
    out = openai_headers({"x-api-key": "cp-client", "Accept-Encoding": "gzip",
                          "OpenAI-Beta": "responses=v1"}, "sk-oa")
    assert dict(out) == {"OpenAI-Beta": "responses=v1", "Accept-Encoding": "identity",
                         "Authorization": "Bearer sk-oa"}


def test_summary_fields_repeat_routing_always_and_the_prefix_only_when_riding_it() -> None:
    body = {"prompt_cache_key": "k", "tools": [1], "other": 2}
    assert summary_fields(body, False, ("prompt_cache_key",), ("tools",)) == {
        "prompt_cache_key": "k"}
    assert summary_fields(body, True, ("prompt_cache_key",), ("tools", "thinking")) == {
        "prompt_cache_key": "k", "tools": [1]}
