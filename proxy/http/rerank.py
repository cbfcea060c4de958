"""``POST /v1/rerank``: the Cohere/Jina rerank shape over one LLM call, fail-open (SPEC section 8).

Request: ``query`` (non-empty string), ``documents`` (list of strings or of objects with a string
``text``), optional ``top_n`` (integer >= 1; larger than the list means all), ``model`` (string),
``return_documents`` (default true). Other fields (``rank_fields``, ``max_chunks_per_doc``, …)
are accepted and ignored, so existing Cohere/Jina clients work unchanged.

Response: ``{"id", "model", "results": [{"index", "relevance_score", "document"?}], "usage"}``
with header ``X-Rerank: applied|skipped|timeout|error|unparsable``. Whatever the outcome, the
indices of ``results`` (before ``top_n`` cuts the list) are a permutation of the input's: the
model call can only change the order. The call is bounded as a whole (connect, first byte and
body) by ``rerank.timeout_ms``; past it the input order is answered at once.

This module only parses (``parse_request``), calls ``proxy.rerank.reranker.Reranker.rerank`` once
(the plan, the model call and its fail-open handling, the metrics) and shapes the answer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from proxy.errors import bad_request
from proxy.http.parse import parse_json_object, read_body
from proxy.rerank.order import relevance_scores
from proxy.rerank.reranker import Ranked, Reranker
from proxy.state import STATE


@dataclass(frozen=True)
class RerankRequest:
    query: str
    documents: list[Any]  # as the client sent them (strings or objects)
    texts: list[str]
    top_n: int | None
    model: str | None
    return_documents: bool


def parse_request(body: dict[str, Any]) -> RerankRequest:
    """Validate the request shape or raise a 400 ``ApiError`` naming the field."""
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise bad_request("'query' must be a non-empty string.", param="query")
    documents = body.get("documents")
    if not isinstance(documents, list):
        raise bad_request("'documents' must be a list of strings or of objects with a string "
                          "'text'.", param="documents")
    texts: list[str] = []
    for i, doc in enumerate(documents):
        if isinstance(doc, str):
            texts.append(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("text"), str):
            texts.append(doc["text"])
        else:
            raise bad_request(f"'documents[{i}]' must be a string or an object with a string "
                              "'text'.", param=f"documents[{i}]")
    top_n = body.get("top_n")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int)
                              or top_n < 1):
        raise bad_request("'top_n' must be an integer >= 1.", param="top_n")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise bad_request("'model' must be a non-empty string.", param="model")
    return_documents = body.get("return_documents", True)
    if not isinstance(return_documents, bool):
        raise bad_request("'return_documents' must be true or false.", param="return_documents")
    return RerankRequest(query, documents, texts, top_n, model, return_documents)


async def rerank(request: web.Request) -> web.Response:
    if request.method != "POST":  # not relayed: the upstream has no such route to offer
        raise web.HTTPMethodNotAllowed(request.method, ["POST"])
    state = request.app[STATE]
    principal = await state.auth.authenticate(request)
    req = parse_request(parse_json_object(await read_body(request,
                                                          state.settings.max_body_bytes)))
    policy = state.policies.resolve(principal.org, principal.user).rerank
    ranked = await Reranker(state.upstream, state.metrics).rerank(
        policy, principal, req.query, req.texts, req.model)
    return web.json_response(_answer(req, ranked), headers={"X-Rerank": ranked.outcome})


def _answer(req: RerankRequest, ranked: Ranked) -> dict[str, Any]:
    """The Cohere/Jina response body: ``ranked.order`` cut to ``top_n``, scored by rank."""
    order = ranked.order
    scores = relevance_scores(len(order))
    results: list[dict[str, Any]] = []
    for rank, index in enumerate(order[:req.top_n] if req.top_n else order):
        item: dict[str, Any] = {"index": index, "relevance_score": scores[rank]}
        if req.return_documents:
            doc = req.documents[index]
            item["document"] = doc if isinstance(doc, dict) else {"text": doc}
        results.append(item)
    return {"id": f"rerank-{uuid.uuid4().hex}", "model": ranked.model,
            "results": results, "usage": {"total_tokens": ranked.tokens}}


def add_routes(app: web.Application) -> None:
    """Register ``POST /v1/rerank``; must come before the ``/v1/{tail}`` relay route."""
    app.router.add_route("*", "/v1/rerank", rerank, name="rerank")
