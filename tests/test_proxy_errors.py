"""The proxy's own errors (``proxy.errors``): OpenAI's shape with a type per status, whether a
client should retry, and Anthropic's shape for the Messages route."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from proxy.errors import ApiError, ConfigError, anthropic_body, as_anthropic, bad_request


def test_an_error_has_openais_shape_and_a_type_per_status() -> None:
    e = ApiError(404, "No such thing.", code="not_found", param="id")
    assert e.body() == {"error": {"message": "No such thing.", "type": "invalid_request_error",
                                  "param": "id", "code": "not_found"}}
    assert (ApiError(429, "x").type, ApiError(403, "x").type, ApiError(502, "x").type,
            ApiError(418, "x").type, ApiError(503, "x", type_="own").type) == (
        "rate_limit_error", "permission_error", "upstream_error", "invalid_request_error", "own")
    assert str(e) == "No such thing."
    assert bad_request("Bad.", param="p").body()["error"] == {
        "message": "Bad.", "type": "invalid_request_error", "param": "p", "code": None}


@pytest.mark.parametrize(("status", "retry"), [
    (400, "false"), (409, "false"), (413, "false"), (408, None), (429, None), (503, "true"),
    (500, None), (502, None)])
def test_the_answer_tells_sdks_whether_asking_again_can_help(status: int, retry: str | None
                                                             ) -> None:
    answer = ApiError(status, "x").response({"X-Other": "1"})
    assert answer.status == status and answer.content_type == "application/json"
    assert answer.headers.get("x-should-retry") == retry and answer.headers["X-Other"] == "1"
    assert json.loads(answer.body)["error"]["message"] == "x"  # type: ignore[arg-type]


def test_an_answer_in_anthropics_shape_keeps_status_and_headers() -> None:
    answer = as_anthropic(ApiError(413, "Too big.").response({"Retry-After": "1"}))
    assert answer.status == 413 and answer.headers["Retry-After"] == "1"
    assert answer.headers["x-should-retry"] == "false"
    assert json.loads(answer.body) == {  # type: ignore[arg-type]
        "type": "error", "error": {"type": "request_too_large", "message": "Too big."}}
    assert anthropic_body(500, "m")["error"] == {"type": "api_error", "message": "m"}
    assert anthropic_body(401, "m")["error"]["type"] == "authentication_error"  # type: ignore


def test_an_answer_not_made_by_apierror_is_left_alone() -> None:
    plain = web.Response(status=500, text="not json")
    assert as_anthropic(plain) is plain
    assert issubclass(ConfigError, ValueError)
