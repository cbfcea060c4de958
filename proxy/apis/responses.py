"""OpenAI's Responses API (``POST /v1/responses``, for Codex and the Agents SDK), at the
OpenAI-compatible upstream (its WebSocket mode is ``proxy.http.websocket.responses_ws``):

- the body read by ``proxy.context.adapters.openai_responses``; a request naming a
  ``previous_response_id`` keeps its history at the upstream and is relayed unmanaged;
- errors in OpenAI's shape; usage: ``input_tokens`` (cache reads included) and
  ``input_tokens_details.cached_tokens`` and ``cache_write_tokens``, ``output_tokens``;
- summary calls in this API with the request's ``prompt_cache_key`` (where its cache lives) and,
  riding the cached prefix, its ``tools`` with ``tool_choice: none`` (this cache is not keyed by
  ``tool_choice``), never stored.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from proxy.apis.api import (
    Api,
    Prompt,
    SummaryAnswer,
    check_common,
    first_int,
    openai_headers,
    summary_fields,
)
from proxy.context.adapters import Adapted, openai_responses
from proxy.upstream.usage import UpstreamUsage, dropped_reasoning

_INPUT = re.compile(rb'"input_tokens"\s*:\s*([0-9]+)')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*([0-9]+)')
_WRITTEN = re.compile(rb'"cache_write_tokens"\s*:\s*([0-9]+)')
_OUTPUT = re.compile(rb'"output_tokens"\s*:\s*([0-9]+)')


def usage(data: bytes) -> UpstreamUsage:
    return UpstreamUsage(first_int(_INPUT, data), first_int(_CACHED, data),
                         first_int(_WRITTEN, data), first_int(_OUTPUT, data),
                         dropped_reasoning(data))


def keeps_history(body: dict[str, Any]) -> bool:
    return body.get("previous_response_id") is not None


def summary_body(adapted: Adapted, model: str, messages: Prompt, max_tokens: int,
                 cached: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"model": model, **adapted.prompt(messages)}
    doc |= summary_fields(adapted.body, cached, ("prompt_cache_key",), ("tools",))
    doc |= {"max_output_tokens": max(16, max_tokens), "store": False}
    if "tools" in doc:
        doc["tool_choice"] = "none"
    return doc


def summary_answer(raw: bytes) -> SummaryAnswer:
    items = orjson.loads(raw)["output"]
    text = "".join(p.get("text", "") for i in items if i.get("type") == "message"
                   for p in i.get("content") or [] if p.get("type") == "output_text")
    called = any(i.get("type") in ("function_call", "custom_tool_call") for i in items)
    return SummaryAnswer(text or None, called, usage(raw))


API = Api(name="responses", route="/v1/responses", path="/responses", headers=openai_headers,
          usage=usage, usage_marker=b'"input_tokens"', read=openai_responses.read,
          check=check_common, keeps_history=keeps_history, answer_kind=("object", "response"),
          stream_end=(b"response.completed", b"response.failed", b"response.incomplete",
                      b"error"),
          summary_body=summary_body, summary_answer=summary_answer)
