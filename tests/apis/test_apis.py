"""The registry of managed APIs (``proxy.apis``): each API module says what its API means; the
registry and the routes take everything from it, so a new API is one new module (each API's own
tests: ``test_apis_messages.py``, ``test_apis_responses.py``)."""

from __future__ import annotations

import json
from dataclasses import replace

from aiohttp import web

from proxy.apis import ADAPTED, APIS, chat_completions, messages, responses
from proxy.errors import ApiError
from proxy.http.apis import add_routes
from proxy.upstream.usage import UpstreamUsage


def test_the_registry_names_each_api_once() -> None:
    assert list(APIS) == ["chat", "messages", "responses"]
    assert [a.name for a in ADAPTED] == ["messages", "responses"]
    assert {a.route for a in APIS.values()} == {"/v1/chat/completions", "/v1/messages",
                                                "/v1/responses"}


def test_chat_completions_are_read_as_they_are_and_report_usage_as_openai_does() -> None:
    assert chat_completions.API.read is None and chat_completions.API.summary_body is None
    assert chat_completions.API.usage(
        b'{"usage": {"prompt_tokens": 90, "completion_tokens": 7, '
        b'"prompt_tokens_details": {"cached_tokens": 64, '
        b'"cache_write_tokens": 16}}}') == UpstreamUsage(90, 64, 16, 7)


def test_errors_in_each_apis_shape() -> None:
    err = ApiError(400, "bad", code="x").response()
    assert json.loads(messages.API.shape(err).body)["type"] == "error"  # type: ignore[arg-type]
    assert responses.API.shape(err) is err and chat_completions.API.shape(err) is err


def test_a_fourth_api_is_one_more_route() -> None:
    fourth = replace(responses.API, name="responses_v2", route="/v2/responses")
    app = web.Application()
    add_routes(app, [*ADAPTED, fourth])
    names = {r.name for r in app.router.resources()}
    assert {"messages", "responses", "responses_v2"} <= names
