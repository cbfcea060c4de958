"""The fake upstream's Anthropic Messages (``POST /v1/messages``) and OpenAI Responses
(``POST /v1/responses``) endpoints, whole and streamed.

Both read a request as a chat-style message list (``as_chat``), so one responder scripts all
three APIs: it returns a chat-style assistant message (``content``, ``tool_calls``), which is
answered in the request's own API. Usage is reported the way each provider does (Anthropic's
``input_tokens`` leaves out ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; the
Responses API reports ``input_tokens_details.cached_tokens`` and ``cache_write_tokens``, as chat
reports them in ``prompt_tokens_details``), from the same emulated prompt cache as chat, keyed
as each provider keys its own (``cache_rules``).

With ``FakeUpstream.strict`` (the default) a request is first checked as the real API checks it
(``proxy.testing.fake.strict_apis``) and refused in its words, before the responder sees it. A
Messages request with thinking on is answered with a signed thinking block first
(``sign_thinking``); a Responses answer of a reasoning model opens with a reasoning item. On the
newest models these are bound to their history and dropped when it changed (``binding``); the
responder reads the history after the provider's own server-side edits (``server_edits``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from typing import Any, Protocol

from aiohttp import web

from proxy.testing.fake import (
    fake_compaction,
    prefix_check,
    server_edits,
    strict_apis,
    strict_responses,
)
from proxy.testing.fake.fake_events import (
    anthropic_events,
    anthropic_message,
    responses_events,
    responses_object,
    responses_output,
)
from proxy.testing.fake.faults import Fault, answer_json
from proxy.testing.fake.prompt_cache import PromptCache
from proxy.testing.fake.strict_apis import sign_thinking as sign_thinking
from proxy.testing.fake.strict_apis import thinking_block as thinking_block


class FakeUpstream(Protocol):
    """What these endpoints use of ``proxy.testing.fake_upstream.FakeUpstream``."""

    models: dict[str, int]
    enforce_windows: bool
    strict: bool
    stream_chunks: int
    reasoning_of: dict[str, str]
    thinking_prefixes: dict[str, set[strict_apis.Prefix]]
    reasoning_book: prefix_check.ReasoningBook
    cache: PromptCache

    async def _record(self, request: web.Request) -> Any: ...  # a Recorded
    async def _scripted(self, request: web.Request, body: Any
                        ) -> tuple[Fault | None, web.StreamResponse | None]: ...
    def measure(self, chat: dict[str, Any]) -> tuple[int, list[int], int]: ...
    async def respond(self, request: web.Request, chat: dict[str, Any],
                      fault: Fault | None) -> dict[str, Any]: ...
    def cached(self, request: web.Request, chat: dict[str, Any],
               measured: tuple[int, list[int], int], *, route: str = "", mode: Any = None,
               head: int = 0) -> int: ...
    async def _stream(self, request: web.Request, events: list[bytes], fault: Fault | None
                      ) -> web.StreamResponse: ...

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
COUNT_TOKENS = "/v1/messages/count_tokens"  # Anthropic's token count (Claude Code calls it)
RECORDED: web.RequestKey[Any] = web.RequestKey("recorded", object)  # the request's ``Recorded``
OUTPUT_TOKENS = 8
THINKING = "Reading the {} messages before answering."  # unless the responder gives its own


# --- requests as chat-style lists ----------------------------------------------------------


def _text(content: Any) -> str:
    """The text of a string or of a list of blocks/parts (text, input_text, output_text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content
                         if isinstance(b, dict) and "text" in b)
    return ""


def _anthropic_pairs(body: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The chat-style messages of a Messages request, each with the index of the message it
    comes from (-1: the top-level ``system``)."""
    system = _text(body.get("system"))
    if system:
        yield -1, {"role": "system", "content": system}
    for i, m in enumerate(body.get("messages") or []):
        blocks = m["content"] if isinstance(m.get("content"), list) else None
        if blocks is None:
            yield i, {"role": m.get("role"), "content": _text(m.get("content"))}
            continue
        for b in blocks:  # tool results first: they answer the previous assistant turn
            if b.get("type") == "tool_result":
                yield i, {"role": "tool", "tool_call_id": b.get("tool_use_id"),
                          "content": _text(b.get("content"))}
        calls = [{"id": b["id"], "type": "function", "function": {
            "name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
            for b in blocks if b.get("type") == "tool_use"]
        text = _text([b for b in blocks if b.get("type") == "text"])
        if text or calls:
            yield i, {"role": m.get("role"), "content": text,
                      **({"tool_calls": calls} if calls else {})}


def _responses_messages(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if body.get("instructions"):
        yield {"role": "system", "content": str(body["instructions"])}
    items = body.get("input")
    if isinstance(items, str):
        yield {"role": "user", "content": items}
        return
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message":
            yield {"role": item.get("role"), "content": _text(item.get("content"))}
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments" if kind == "function_call" else "input")
            yield {"role": "assistant", "content": "", "tool_calls": [{
                "id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": arguments}}]}
        elif kind in ("function_call_output", "custom_tool_call_output"):
            yield {"role": "tool", "tool_call_id": item.get("call_id"),
                   "content": _text(item.get("output"))}
        # reasoning and other items: opaque, not part of what the responder reads


def as_chat(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The request as a chat completions body: model, messages, tools (function schemas)."""
    if path == MESSAGES:
        messages = [m for _, m in _anthropic_pairs(body)]
        tools = [{"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("input_schema", {})}} for t in body.get("tools") or []]
    else:
        messages = list(_responses_messages(body))
        tools = [{"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("parameters", {})}} for t in body.get("tools") or []
            if t.get("type") in ("function", "custom")]  # a custom tool: its input is text
    return {"model": body.get("model"), "messages": messages, "tools": tools or None}


# --- answers ---------------------------------------------------------------------------------


def usage_for(path: str, prompt_tokens: int, cached: int, written: int = 0) -> dict[str, Any]:
    """Usage as each provider reports it: Anthropic's ``input_tokens`` leaves out the tokens
    read from (``cached``) and written to (``written``) the cache; the Responses API's counts
    them, and says how many in ``input_tokens_details``."""
    if path == MESSAGES:
        return {"input_tokens": prompt_tokens - cached - written,
                "cache_read_input_tokens": cached, "cache_creation_input_tokens": written,
                "output_tokens": OUTPUT_TOKENS}
    return {"input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
            "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + OUTPUT_TOKENS}


def too_long_message(path: str, tokens: int, window: int) -> str:
    if path == MESSAGES:
        return f"prompt is too long: {tokens} tokens > {window} maximum"
    return (f"Your input exceeds the context window of this model ({window} tokens; the input "
            f"has {tokens}). Please adjust your input and try again.")


def too_long(path: str, tokens: int, window: int) -> web.Response:
    """A context-length refusal in the API's own shape."""
    message = too_long_message(path, tokens, window)
    if path == MESSAGES:
        return web.json_response({"type": "error", "error": {
            "type": "invalid_request_error", "message": message}}, status=400)
    return web.json_response({"error": {
        "message": message, "type": "invalid_request_error", "param": "input",
        "code": "context_length_exceeded"}}, status=400)


def bad_request(path: str, message: str) -> web.Response:
    if path == MESSAGES:
        return web.json_response({"type": "error", "error": {
            "type": "invalid_request_error", "message": message}}, status=400)
    return web.json_response({"error": {"message": message, "type": "invalid_request_error",
                                        "param": None, "code": None}}, status=400)


# --- the handler -----------------------------------------------------------------------------


def _check(path: str, body: Any) -> str | None:
    """What makes ``body`` unacceptable to the real API, roughly; ``None`` when it is fine."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "model: field required"
    if path == MESSAGES:
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: field required"
        if not isinstance(body.get("messages"), list):
            return "messages: field required"
    elif not isinstance(body.get("input"), str | list):
        return "input: field required"
    return None


def refusal(path: str, problem: strict_apis.Refusal) -> web.Response:
    """A strict check's refusal in the API's own shape."""
    if path == MESSAGES:
        return bad_request(path, problem.message)
    return web.json_response({"error": {"message": problem.message,
                                        "type": "invalid_request_error",
                                        "param": problem.param, "code": None}}, status=400)


def strict_check(fake: FakeUpstream, request: web.Request, body: dict[str, Any]
                 ) -> strict_apis.Refusal | None:
    """What the real API would refuse in this (well-formed) request."""
    if request.path == MESSAGES:
        return strict_apis.check_messages(body, strict_apis.betas(request.headers),
                                          fake.thinking_prefixes)
    return strict_responses.check_responses(body, fake.reasoning_of,
                                            fake.reasoning_book.dropped)


def cache_rules(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """How the provider keys its cache for this request (``FakeUpstream.cached``'s keywords):
    OpenAI routes by ``prompt_cache_key``; Anthropic reads cached messages only under the same
    ``tool_choice`` and thinking setting, else only tools and system."""
    if path == MESSAGES:
        return {"mode": json.dumps([body.get("tool_choice"), body.get("thinking")],
                                   sort_keys=True),
                "head": 1 if _text(body.get("system")) else 0}
    return {"route": str(body.get("prompt_cache_key") or "")}


def cache_written(fake: FakeUpstream, body: dict[str, Any], measured: tuple[int, list[int], int],
                  cached: int) -> int:
    """Anthropic's ``cache_creation_input_tokens``: with ``cache_control`` markers, the tokens
    up to the last marked block (tools, then system, then messages, whole messages at a time)
    past what was read from cache; 0 without markers or under the cache's minimum."""
    mark = strict_apis.last_cache_mark(body)
    if mark is None or not fake.cache.enabled:
        return 0
    prompt, per_message, tools_tokens = measured
    sources = [src for src, _ in _anthropic_pairs(body)]
    last = -1 if mark == "system" else -2 if mark == "tools" else int(mark)
    prefix = tools_tokens + sum(t for t, src in zip(per_message, sources, strict=True)
                                if src <= last)
    if prefix < fake.cache.min_tokens:
        return 0
    return max(0, min(prefix, prompt) - cached)


async def answer(fake: FakeUpstream, request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages`` or ``/v1/responses``: recorded, faults applied, checked (strictly
    when ``fake.strict``: a refusal is recorded in ``Recorded.refused`` and the responder is not
    called), then answered."""
    rec = await fake._record(request)
    path = request.path
    try:
        body = rec.json
    except ValueError:
        rec.refused = "The body is not valid JSON."
        return bad_request(path, rec.refused)
    fault, early = await fake._scripted(request, body)
    if early is not None:
        return early
    basic = _check(path, body)
    if basic is not None:
        rec.refused = basic
        return bad_request(path, basic)
    if (early := await fake_compaction.answer(fake, request, body, as_chat, rec)) is not None:
        return early
    problem = strict_check(fake, request, body) if fake.strict else None
    if problem is not None:
        rec.refused = problem.message
        return refusal(path, problem)
    body, dropped = prefix_check.drops(fake, path == MESSAGES, body, request.headers)
    rec.dropped = len(dropped)
    seen, managed = server_edits.model_view(
        body, strict_apis.betas(request.headers), lambda b: fake.measure(as_chat(path, b))[0]
    ) if path == MESSAGES else (body, None)  # what the model reads of the history
    changed = ({"input_transformations": dropped} if dropped else {}) | (
        {"context_management": managed} if managed is not None else {})
    chat = as_chat(path, fake_compaction.expanded(seen))
    measured = fake.measure(chat)
    prompt_tokens = measured[0]
    window = fake.models.get(body["model"])
    if (fake.enforce_windows or fake.strict) and window and prompt_tokens > window:
        rec.refused = too_long_message(path, prompt_tokens, window)
        return too_long(path, prompt_tokens, window)
    message = await fake.respond(request, chat, fault)
    cached = fake.cached(request, chat, measured, **cache_rules(path, body))
    written = cache_written(fake, seen, measured, cached) if path == MESSAGES \
        else fake.cache.written(prompt_tokens, cached)
    usage = usage_for(path, prompt_tokens, cached, written)
    rec.usage = usage
    if path == MESSAGES:
        thinking = (str(message.get("reasoning_content")
                        or THINKING.format(len(body["messages"])))
                    if strict_apis.thinking_enabled(body) else None)
        whole = anthropic_message(body["model"], message, usage, thinking) | changed
        prefix_check.bind_thinking(fake, body, whole)
        events = anthropic_events(whole, fake.stream_chunks)
    else:
        output = responses_output(message, body)
        if output and output[0]["type"] == "reasoning":
            fake.reasoning_of.update((item["id"], output[0]["id"]) for item in output[1:])
        prefix_check.bind_reasoning(fake, body, output)
        whole = responses_object(body["model"], output, usage) | changed
        events = responses_events(body["model"], output, usage, fake.stream_chunks, changed)
    if body.get("stream"):
        return await fake._stream(request, events, fault)
    return await answer_json(request, whole, fault)


async def note_answer(request: web.Request, response: web.StreamResponse) -> None:
    """On every answer the fake starts: its status (and a whole error's body) on the request's
    ``Recorded`` (``status``, ``error``)."""
    rec = request.get(RECORDED)
    if rec is not None:
        rec.status = response.status
        body = getattr(response, "body", None)
        if response.status >= 400 and isinstance(body, bytes):
            rec.error = body.decode("utf-8", "replace")


async def count_tokens(fake: FakeUpstream, request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages/count_tokens``: the prompt's ``input_tokens`` by the fake's measure."""
    rec = await fake._record(request)
    try:
        body = rec.json
    except ValueError:
        return bad_request(MESSAGES, "The body is not valid JSON.")
    fault, early = await fake._scripted(request, body)
    if early is not None:
        return early
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return bad_request(MESSAGES, "messages: field required")
    return await answer_json(request, {"input_tokens": fake.measure(as_chat(MESSAGES, body))[0]},
                             fault)


def embed(text: str, dims: int = 64) -> list[float]:
    """A deterministic bag-of-words embedding: texts sharing words are close."""
    vec = [0.0] * dims
    for word in text.lower().split():
        h = hashlib.blake2b(word.strip(".,;:!?\"'()").encode(), digest_size=8).digest()
        idx = int.from_bytes(h[:4], "big") % dims
        vec[idx] += 1.0 if h[4] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]
