"""The request parser (``proxy.http.parse``): a body over the limit is a 413, a body that is not
a JSON object a 400, and each message's shape is checked naming the field at fault; what the
proxy need not understand passes untouched."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from inproc import request

from proxy.apis.api import check_common
from proxy.errors import ApiError
from proxy.http.parse import check_chat, parse_json_object, read_body, read_chat

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def chat(messages: list[Any], **extra: Any) -> Any:
    body = {"model": "m", "messages": messages, **extra}
    return check_chat(orjson.dumps(body), body)


def test_a_good_request_is_read_with_everything_it_carries() -> None:
    got = chat([{"role": "system", "content": "s"}, {"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
        stream=True, tools=[{"type": "function"}], logprobs=True)
    assert (got.model, got.stream, len(got.messages)) == ("m", True, 4)
    assert got.tools == [{"type": "function"}] and got.body["logprobs"] is True


@pytest.mark.parametrize(("messages", "extra", "param"), [
    ([], {}, "messages"), ("hi", {}, "messages"),
    (["hi"], {}, "messages[0]"),
    ([{"role": "robot", "content": "x"}], {}, "messages[0].role"),
    ([{"role": "user"}], {}, "messages[0].content"),
    ([{"role": "user", "content": None}], {}, "messages[0].content"),
    ([{"role": "user", "content": 3}], {}, "messages[0].content"),
    ([{"role": "user", "content": [{"type": "text", "text": 1}]}], {}, "messages[0].content[0]"),
    ([{"role": "user", "content": "x", "name": 2}], {}, "messages[0].name"),
    ([{"role": "tool", "content": "x"}], {}, "messages[0].tool_call_id"),
    ([{"role": "assistant", "content": "x", "tool_calls": {}}], {}, "messages[0].tool_calls"),
    ([{"role": "assistant", "tool_calls": [{"id": 1}]}], {}, "messages[0].tool_calls[0]"),
    ([{"role": "user", "content": "x"}], {"stream": "yes"}, "stream"),
    ([{"role": "user", "content": "x"}], {"tools": {}}, "tools"),
    ([{"role": "user", "content": "x"}], {"model": ""}, "model"),
])
def test_a_bad_shape_is_a_400_naming_its_field(messages: Any, extra: dict[str, Any],
                                                param: str) -> None:
    with pytest.raises(ApiError) as info:
        chat(messages, **extra)
    assert (info.value.status, info.value.param) == (400, param)


def test_a_bad_order_is_refused_as_an_invalid_sequence() -> None:
    with pytest.raises(ApiError) as info:
        chat([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "zz",
                                                 "content": "orphan"}])
    assert (info.value.code, info.value.param) == ("invalid_message_sequence", "messages")


def test_only_a_json_object_is_a_body() -> None:
    assert parse_json_object(b'{"a": 1}') == {"a": 1}
    for raw in (b"{oops", b"[1]", b'"text"', b"NaN"):
        with pytest.raises(ApiError) as info:
            parse_json_object(raw)
        assert info.value.code == "invalid_json"


async def test_reading_a_body_over_the_limit_is_a_413(
        make_app: Callable[..., Awaitable[web.Application]]) -> None:
    app = await make_app()
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 200}]}
    with pytest.raises(ApiError) as info:
        await read_body(request(app, "POST", "/v1/chat/completions", body=body), 100)
    assert (info.value.status, info.value.code) == (413, "request_too_large")
    got = await read_chat(request(app, "POST", "/v1/chat/completions", body=body), 10_000)
    assert got.messages[0]["content"] == "x" * 200 and got.raw == json.dumps(body).encode()


@pytest.mark.parametrize("common", [
    {"model": ""}, {"model": 3}, {"model": "m", "stream": "yes"}, {"model": "m", "tools": {}}])
def test_a_chat_body_is_refused_as_every_apis_body_is_first(common: dict[str, Any]) -> None:
    """What every managed API's body must have (``check_common``) is checked first and refused
    the same way on chat completions, even when its messages are wrong too."""
    body = {**common, "messages": []}
    with pytest.raises(ApiError) as common_error:
        check_common(body)
    with pytest.raises(ApiError) as chat_error:
        check_chat(orjson.dumps(body), body)
    assert (chat_error.value.status, chat_error.value.param, str(chat_error.value)) == \
        (common_error.value.status, common_error.value.param, str(common_error.value))
