"""``POST /v1/rerank`` (``proxy.http.rerank``): the request shape checked field by field, and
the answer in the Cohere/Jina shape (top ``n``, scores by rank, documents as sent), called in
process in front of the fake upstream."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from inproc import routed

from proxy.errors import ApiError
from proxy.http.rerank import parse_request, rerank
from proxy.state import STATE

App = Callable[..., Awaitable[web.Application]]


@pytest.mark.parametrize(("body", "param"), [
    ({"documents": []}, "query"), ({"query": " ", "documents": []}, "query"),
    ({"query": "q"}, "documents"), ({"query": "q", "documents": [3]}, "documents[0]"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": True}, "top_n"),
    ({"query": "q", "documents": ["a"], "model": ""}, "model"),
    ({"query": "q", "documents": ["a"], "return_documents": "no"}, "return_documents")])
def test_each_field_is_checked(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_request(body)
    assert (info.value.status, info.value.param) == (400, param)


def test_documents_may_be_strings_or_objects_with_text() -> None:
    req = parse_request({"query": "q", "documents": ["a", {"text": "b", "id": 7}], "top_n": 1})
    assert (req.texts, req.top_n, req.return_documents) == (["a", "b"], 1, True)


async def test_the_answer_keeps_the_input_order_when_rerank_is_off(make_app: App) -> None:
    app = await make_app()
    key = app[STATE].store.keys.create("acme")[1]
    answer = await rerank(await routed(
        app, "POST", "/v1/rerank", headers={"Authorization": f"Bearer {key}"},
        body={"query": "q", "documents": ["a", {"text": "b", "id": 7}, "c"], "top_n": 2}))
    body = json.loads(answer.text or "")
    assert answer.headers["X-Rerank"] == "skipped"
    assert body["results"] == [{"index": 0, "relevance_score": 1.0, "document": {"text": "a"}},
                               {"index": 1, "relevance_score": round(1 - 1 / 3, 6),
                                "document": {"text": "b", "id": 7}}]
    assert body["id"].startswith("rerank-") and body["usage"] == {"total_tokens": 0}
    with pytest.raises(web.HTTPMethodNotAllowed):
        await rerank(await routed(app, "GET", "/v1/rerank"))
