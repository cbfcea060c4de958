"""Anthropic's Messages API (``POST /v1/messages``, for Claude Code and the ``anthropic`` SDKs),
at the Anthropic-compatible upstream (``CONTEXT_PROXY_ANTHROPIC_URL``):

- the body read by ``proxy.context.adapters.anthropic``; ``max_tokens`` is required;
- errors in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``), a broken
  stream ended with an ``event: error``;
- the key as ``x-api-key``, ``anthropic-version`` set when the client sent none, betas passed;
- usage: ``input_tokens`` leaves out the cache reads and writes, which are added back;
- summary calls in this API that repeat ``tools``, ``tool_choice`` and ``thinking`` when they
  ride the cached prefix (a change of any invalidates Anthropic's cache of the messages), with
  a ``cache_control`` marker at the end of the covered range when the client marks messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson
from multidict import CIMultiDict

from proxy.apis.api import Api, Prompt, SummaryAnswer, check_common, first_int, summary_fields
from proxy.context.adapters import Adapted, anthropic
from proxy.errors import as_anthropic, bad_request
from proxy.upstream.client import request_headers
from proxy.upstream.usage import UpstreamUsage, dropped_reasoning

ANTHROPIC_VERSION = "2023-06-01"
STREAM_ERROR = b"event: error\ndata: " + json.dumps({"type": "error", "error": {
    "type": "api_error", "message": "The upstream stream ended unexpectedly."}}).encode() \
    + b"\n\n"

_INPUT = re.compile(rb'"input_tokens"\s*:\s*([0-9]+)')
_CACHE_READ = re.compile(rb'"cache_read_input_tokens"\s*:\s*([0-9]+)')
_CACHE_WRITE = re.compile(rb'"cache_creation_input_tokens"\s*:\s*([0-9]+)')
_OUTPUT = re.compile(rb'"output_tokens"\s*:\s*([0-9]+)')
MAX_MARKERS = 4  # cache_control blocks Anthropic accepts in one request


def usage(data: bytes) -> UpstreamUsage:
    read, written = first_int(_CACHE_READ, data), first_int(_CACHE_WRITE, data)
    return UpstreamUsage(first_int(_INPUT, data) + read + written, read, written,
                         first_int(_OUTPUT, data), dropped_reasoning(data))


def headers(incoming: Mapping[str, str], key: str | None) -> CIMultiDict[str]:
    out = request_headers(incoming, None, identity=True)
    if key:
        out["x-api-key"] = key
    out.setdefault("anthropic-version", ANTHROPIC_VERSION)
    return out


def check(body: dict[str, Any]) -> None:
    check_common(body)
    if not isinstance(body.get("max_tokens"), int) or isinstance(body.get("max_tokens"), bool):
        raise bad_request("'max_tokens' is required and must be an integer.",
                          param="max_tokens")


def summary_body(adapted: Adapted, model: str, messages: Prompt, max_tokens: int,
                 cached: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"model": model, **adapted.prompt(messages)}
    doc |= summary_fields(adapted.body, cached, (), ("tools", "tool_choice", "thinking"))
    doc["max_tokens"] = max_tokens + _thinking_budget(doc.get("thinking"))
    if "thinking" not in doc:  # thinking takes only the default temperature
        doc["temperature"] = 0
    if cached:
        _mark_prefix_end(doc, adapted.body, _added(adapted, messages))
    return doc


def _added(adapted: Adapted, messages: Prompt) -> int:
    """How many of the prompt's last messages are the summary call's own (the originals'
    notes, the instruction): user messages the request did not hold, after the covered range
    (whose masked results are copies too, but tool messages)."""
    known = {id(m) for m in adapted.messages}
    n = 0
    while n < len(messages) and id(messages[-1 - n]) not in known and \
            messages[-1 - n].get("role") == "user":
        n += 1
    return n


def _markers(value: Any) -> int:
    """``cache_control`` markers in a block list (tool results' nested content included)."""
    return sum(bool(b.get("cache_control")) + _markers(b.get("content"))
               for b in value if isinstance(b, dict)) if isinstance(value, list) else 0


def _mark_prefix_end(doc: dict[str, Any], body: Mapping[str, Any], added: int) -> None:
    """A summary call riding the cached prefix sends the covered range, which ends before the
    client's newest messages and so before its last ``cache_control`` marker; Anthropic reads
    its cache only at a marker (looking back from it), so the range's last block gets one, as
    the client marked it when that message was its newest, when the client marks messages and
    the API's four markers allow it. ``added``: the messages after the range (the summary's
    own)."""
    msgs = doc["messages"]
    if added >= len(msgs) or not any(_markers(m.get("content")) for m in body["messages"]
                                     if isinstance(m, dict)):
        return
    used = _markers(doc.get("system")) + _markers(doc.get("tools")) + \
        sum(_markers(m.get("content")) for m in msgs)
    end = msgs[-1 - added]
    content = end.get("content")
    if used >= MAX_MARKERS or not isinstance(content, list) or not content or \
            not isinstance(content[-1], dict) or content[-1].get("cache_control"):
        return
    msgs[-1 - added] = {**end, "content": [*content[:-1], {
        **content[-1], "cache_control": {"type": "ephemeral"}}]}


def _thinking_budget(thinking: Any) -> int:
    """The tokens a thinking setting may spend before the answer (``max_tokens`` must exceed
    them)."""
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    return budget if isinstance(budget, int) and not isinstance(budget, bool) \
        and thinking.get("type") == "enabled" else 0


def summary_answer(raw: bytes) -> SummaryAnswer:
    data = orjson.loads(raw)
    text = "".join(b.get("text", "") for b in data["content"] if b.get("type") == "text")
    return SummaryAnswer(text or None, data.get("stop_reason") == "tool_use", usage(raw))


BINDING_BETA = "thinking-binding-controls-2026-08-01"


def binding_controls(body: dict[str, Any], headers: Mapping[str, str]) -> Mapping[str, str]:
    """Ask the provider to drop, not refuse, thinking blocks whose prefix the proxy changed
    (``thinking.block_binding.prefix_mismatch_behavior: drop_block`` under its beta); a body
    without ``thinking`` gets the adaptive thinking such models do by default. Sets the body in
    place; returns the headers with the beta added."""
    thinking = body.get("thinking")
    thinking = dict(thinking) if isinstance(thinking, dict) else {"type": "adaptive"}
    thinking["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
    body["thinking"] = thinking
    out = CIMultiDict(headers)
    betas = [b.strip() for b in out.get("anthropic-beta", "").split(",") if b.strip()]
    if BINDING_BETA not in betas:
        out["anthropic-beta"] = ", ".join([*betas, BINDING_BETA])
    return out


API = Api(name="messages", route="/v1/messages", path="/messages", headers=headers,
          usage=usage, usage_marker=b'"input_tokens"', anthropic=True, read=anthropic.read,
          check=check, shape=as_anthropic, stream_error=STREAM_ERROR,
          stream_end=(b"message_stop", b"error"),
          answer_kind=("type", "message"), summary_body=summary_body,
          summary_answer=summary_answer, binding_controls=binding_controls)
