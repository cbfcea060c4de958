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
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from proxy.auth import Principal
from proxy.errors import bad_request
from proxy.http.parse import parse_json_object, read_body
from proxy.rerank.order import Outcome, build_messages, merge, plan, relevance_scores, rerank_order
from proxy.state import STATE, ProxyState

log = logging.getLogger("context_proxy.rerank")


class ModelCallFailed(Exception):
    """The ranking call did not produce an answer (status, transport or body shape)."""


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


async def ask_model(state: ProxyState, principal: Principal, model: str,
                    messages: list[dict[str, Any]], max_tokens: int) -> tuple[str | None, int]:
    """One chat completion through the shared upstream session: ``(content, total_tokens)``.

    Raises ``ModelCallFailed`` (or the upstream's ``ApiError``) when no answer came back; the
    caller bounds the whole call with its own timeout.
    """
    payload = {"model": model, "messages": messages, "temperature": 0,
               "max_tokens": max_tokens, "stream": False}
    # The shared session neither decompresses nor adds a Content-Type: ask for plain JSON.
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if principal.upstream_key:
        headers["Authorization"] = f"Bearer {principal.upstream_key}"
    resp = await state.upstream.open("POST", "/chat/completions", headers,
                                     json.dumps(payload).encode())
    try:
        raw = await resp.read()
    finally:
        resp.release()
    if resp.status != 200:
        raise ModelCallFailed(f"upstream answered {resp.status}")
    try:
        data = json.loads(raw)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ModelCallFailed("upstream answer is not a chat completion") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens = usage.get("total_tokens", 0)
    content = message.get("content") if isinstance(message, dict) else None
    return (content if isinstance(content, str) else None,
            tokens if isinstance(tokens, int) else 0)


async def rerank(request: web.Request) -> web.Response:
    if request.method != "POST":  # not relayed: the upstream has no such route to offer
        raise web.HTTPMethodNotAllowed(request.method, ["POST"])
    state = request.app[STATE]
    principal = state.auth.authenticate(request)
    req = parse_request(parse_json_object(await read_body(request,
                                                          state.settings.max_body_bytes)))
    policy = state.policies.resolve(principal.org, principal.user).rerank
    n = len(req.texts)
    decision = plan(policy, n, req.model)
    order, outcome, tokens = merge(n, None), "skipped", 0
    if decision.candidates:
        assert decision.model is not None
        order, outcome, tokens = await _call(state, principal, req, decision.candidates,
                                             decision.model, policy.timeout_ms)
    state.metrics.rerank.labels(outcome).inc()
    return web.json_response(_answer(req, order, decision.model, tokens),
                             headers={"X-Rerank": outcome})


async def _call(state: ProxyState, principal: Principal, req: RerankRequest, candidates: int,
                model: str, timeout_ms: int) -> tuple[list[int], Outcome, int]:
    """Ask the model for the first ``candidates``; every failure gives the input order."""
    n = len(req.texts)
    messages = build_messages(req.query, req.texts[:candidates])
    # ~4 tokens per index ("12, ") plus the brackets: room enough, but no essay.
    max_tokens = 16 + 6 * candidates
    start = time.perf_counter()
    outcome: Outcome
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            answer, tokens = await ask_model(state, principal, model, messages, max_tokens)
    except TimeoutError:
        order, outcome, tokens = merge(n, None), "timeout", 0
    except Exception as e:  # an ApiError (502/504), ModelCallFailed, a transport error
        log.warning("rerank call failed for org %s: %s", principal.org,
                    getattr(e, "message", None) or type(e).__name__)
        order, outcome, tokens = merge(n, None), "error", 0
    else:
        order, outcome, kind = rerank_order(n, candidates, answer)
        if kind:
            log.info("rerank answer unparsable for org %s: %s", principal.org, kind)
    state.metrics.rerank_duration.labels(outcome).observe(time.perf_counter() - start)
    return order, outcome, tokens


def _answer(req: RerankRequest, order: list[int], model: str | None,
            tokens: int) -> dict[str, Any]:
    scores = relevance_scores(len(order))
    results: list[dict[str, Any]] = []
    for rank, index in enumerate(order[:req.top_n] if req.top_n else order):
        item: dict[str, Any] = {"index": index, "relevance_score": scores[rank]}
        if req.return_documents:
            doc = req.documents[index]
            item["document"] = doc if isinstance(doc, dict) else {"text": doc}
        results.append(item)
    return {"id": f"rerank-{uuid.uuid4().hex}", "model": model,
            "results": results, "usage": {"total_tokens": tokens}}


def add_routes(app: web.Application) -> None:
    """Register ``POST /v1/rerank``; must come before the ``/v1/{tail}`` relay route."""
    app.router.add_route("*", "/v1/rerank", rerank, name="rerank")
