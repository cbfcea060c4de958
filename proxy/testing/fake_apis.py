"""The fake upstream's Anthropic Messages (``POST /v1/messages``) and OpenAI Responses
(``POST /v1/responses``) endpoints, whole and streamed.

Both read a request as a chat-style message list (``as_chat``), so one responder scripts all
three APIs: it returns a chat-style assistant message (``content``, ``tool_calls``), which is
answered in the request's own API. Usage is reported the way each provider does (Anthropic's
``input_tokens`` leaves out ``cache_read_input_tokens``; the Responses API reports
``input_tokens_details.cached_tokens``), from the same emulated prompt cache as chat.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Iterator
from typing import Any, Protocol

from aiohttp import web

from proxy.testing.faults import Fault, answer_json


class FakeUpstream(Protocol):
    """What these endpoints use of ``proxy.testing.fake_upstream.FakeUpstream``."""

    models: dict[str, int]
    enforce_windows: bool
    stream_chunks: int

    async def _record(self, request: web.Request) -> Any: ...
    async def _scripted(self, request: web.Request, body: Any
                        ) -> tuple[Fault | None, web.StreamResponse | None]: ...
    def measure(self, chat: dict[str, Any]) -> tuple[int, list[int], int]: ...
    async def respond(self, request: web.Request, chat: dict[str, Any],
                      fault: Fault | None) -> dict[str, Any]: ...
    def cached(self, request: web.Request, chat: dict[str, Any],
               measured: tuple[int, list[int], int]) -> int: ...
    async def _stream(self, request: web.Request, events: list[bytes], fault: Fault | None
                      ) -> web.StreamResponse: ...

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
COUNT_TOKENS = "/v1/messages/count_tokens"  # Anthropic's token count (Claude Code calls it)
RECORDED: web.RequestKey[Any] = web.RequestKey("recorded", object)  # the request's ``Recorded``
OUTPUT_TOKENS = 8


# --- requests as chat-style lists ----------------------------------------------------------


def _text(content: Any) -> str:
    """The text of a string or of a list of blocks/parts (text, input_text, output_text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content
                         if isinstance(b, dict) and "text" in b)
    return ""


def _anthropic_messages(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    system = _text(body.get("system"))
    if system:
        yield {"role": "system", "content": system}
    for m in body.get("messages") or []:
        blocks = m["content"] if isinstance(m.get("content"), list) else None
        if blocks is None:
            yield {"role": m.get("role"), "content": _text(m.get("content"))}
            continue
        for b in blocks:  # tool results first: they answer the previous assistant turn
            if b.get("type") == "tool_result":
                yield {"role": "tool", "tool_call_id": b.get("tool_use_id"),
                       "content": _text(b.get("content"))}
        calls = [{"id": b["id"], "type": "function", "function": {
            "name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
            for b in blocks if b.get("type") == "tool_use"]
        text = _text([b for b in blocks if b.get("type") == "text"])
        if text or calls:
            yield {"role": m.get("role"), "content": text, **({"tool_calls": calls} if calls
                                                               else {})}


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
        elif kind == "function_call":
            yield {"role": "assistant", "content": "", "tool_calls": [{
                "id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")}}]}
        elif kind == "function_call_output":
            yield {"role": "tool", "tool_call_id": item.get("call_id"),
                   "content": _text(item.get("output"))}
        # reasoning and other items: opaque, not part of what the responder reads


def as_chat(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The request as a chat completions body: model, messages, tools (function schemas)."""
    if path == MESSAGES:
        messages = list(_anthropic_messages(body))
        tools = [{"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("input_schema", {})}} for t in body.get("tools") or []]
    else:
        messages = list(_responses_messages(body))
        tools = [{"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("parameters", {})}} for t in body.get("tools") or []
            if t.get("type") == "function"]
    return {"model": body.get("model"), "messages": messages, "tools": tools or None}


# --- answers ---------------------------------------------------------------------------------


def anthropic_message(model: str, message: dict[str, Any], usage: dict[str, Any]
                      ) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"] or "{}")})
    return {"id": "msg_" + secrets.token_hex(8), "type": "message", "role": "assistant",
            "model": model, "content": blocks,
            "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn",
            "stop_sequence": None, "usage": usage}


def responses_output(message: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.get("content"):
        items.append({"type": "message", "id": "msg_" + secrets.token_hex(8),
                      "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": message["content"],
                                   "annotations": []}]})
    for call in message.get("tool_calls") or []:
        items.append({"type": "function_call", "id": "fc_" + secrets.token_hex(8),
                      "call_id": call["id"], "name": call["function"]["name"],
                      "arguments": call["function"]["arguments"], "status": "completed"})
    return items


def responses_object(model: str, output: list[dict[str, Any]], usage: dict[str, Any] | None,
                     status: str = "completed") -> dict[str, Any]:
    return {"id": "resp_fake", "object": "response", "created_at": int(time.time()),
            "status": status, "model": model, "output": output, "usage": usage,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": None, "instructions": None, "metadata": {}}


def usage_for(path: str, prompt_tokens: int, cached: int) -> dict[str, Any]:
    if path == MESSAGES:
        return {"input_tokens": prompt_tokens - cached, "cache_read_input_tokens": cached,
                "cache_creation_input_tokens": 0, "output_tokens": OUTPUT_TOKENS}
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + OUTPUT_TOKENS}


def too_long(path: str, tokens: int, window: int) -> web.Response:
    """A context-length refusal in the API's own shape."""
    if path == MESSAGES:
        return web.json_response({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {tokens} tokens > {window} maximum"}}, status=400)
    return web.json_response({"error": {
        "message": f"Your input exceeds the context window of this model ({window} tokens; "
                   f"the input has {tokens}). Please adjust your input and try again.",
        "type": "invalid_request_error", "param": "input",
        "code": "context_length_exceeded"}}, status=400)


def bad_request(path: str, message: str) -> web.Response:
    if path == MESSAGES:
        return web.json_response({"type": "error", "error": {
            "type": "invalid_request_error", "message": message}}, status=400)
    return web.json_response({"error": {"message": message, "type": "invalid_request_error",
                                        "param": None, "code": None}}, status=400)


# --- streamed events -------------------------------------------------------------------------


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _pieces(text: str, n: int) -> list[str]:
    step = max(1, math.ceil(len(text) / max(1, n)))
    return [text[i:i + step] for i in range(0, len(text), step)]


def anthropic_events(whole: dict[str, Any], chunks: int) -> list[bytes]:
    usage = whole["usage"]
    start = dict(whole, content=[], stop_reason=None,
                 usage=dict(usage, output_tokens=1))
    out = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(whole["content"]):
        if block["type"] == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], chunks)]
        else:
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p}
                      for p in _pieces(json.dumps(block["input"]), chunks)]
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": first}))
        out += [_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                             "delta": d}) for d in deltas]
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": whole["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def responses_events(model: str, output: list[dict[str, Any]], usage: dict[str, Any],
                     chunks: int) -> list[bytes]:
    seq = iter(range(1_000_000))
    out = [_sse("response.created", {"type": "response.created", "sequence_number": next(seq),
                                     "response": responses_object(model, [], None,
                                                                  "in_progress")})]
    for i, item in enumerate(output):
        opening = dict(item, status="in_progress")
        if item["type"] == "message":
            opening["content"] = []
        else:
            opening["arguments"] = ""
        out.append(_sse("response.output_item.added", {
            "type": "response.output_item.added", "sequence_number": next(seq),
            "output_index": i, "item": opening}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": i, "content_index": 0}
            out.append(_sse("response.content_part.added", {
                "type": "response.content_part.added", "sequence_number": next(seq),
                **where, "part": part}))
            out += [_sse("response.output_text.delta", {
                "type": "response.output_text.delta", "sequence_number": next(seq), **where,
                "delta": p}) for p in _pieces(text, chunks)]
            out.append(_sse("response.output_text.done", {
                "type": "response.output_text.done", "sequence_number": next(seq), **where,
                "text": text}))
            out.append(_sse("response.content_part.done", {
                "type": "response.content_part.done", "sequence_number": next(seq), **where,
                "part": dict(part, text=text)}))
        else:
            out += [_sse("response.function_call_arguments.delta", {
                "type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                "item_id": item["id"], "output_index": i, "delta": p})
                for p in _pieces(item["arguments"], chunks)]
            out.append(_sse("response.function_call_arguments.done", {
                "type": "response.function_call_arguments.done", "sequence_number": next(seq),
                "item_id": item["id"], "output_index": i, "arguments": item["arguments"]}))
        out.append(_sse("response.output_item.done", {
            "type": "response.output_item.done", "sequence_number": next(seq),
            "output_index": i, "item": item}))
    out.append(_sse("response.completed", {
        "type": "response.completed", "sequence_number": next(seq),
        "response": responses_object(model, output, usage)}))
    return out


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


async def answer(fake: FakeUpstream, request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages`` or ``/v1/responses``: recorded, faults applied, then answered."""
    rec = await fake._record(request)
    try:
        body = rec.json
    except ValueError:
        return bad_request(request.path, "The body is not valid JSON.")
    fault, early = await fake._scripted(request, body)
    if early is not None:
        return early
    problem = _check(request.path, body)
    if problem is not None:
        return bad_request(request.path, problem)
    chat = as_chat(request.path, body)
    measured = fake.measure(chat)
    prompt_tokens = measured[0]
    window = fake.models.get(body["model"])
    if fake.enforce_windows and window and prompt_tokens > window:
        return too_long(request.path, prompt_tokens, window)
    message = await fake.respond(request, chat, fault)
    cached = fake.cached(request, chat, measured)
    usage = usage_for(request.path, prompt_tokens, cached)
    rec.usage = usage
    if request.path == MESSAGES:
        whole = anthropic_message(body["model"], message, usage)
        events = anthropic_events(whole, fake.stream_chunks)
    else:
        output = responses_output(message)
        whole = responses_object(body["model"], output, usage)
        events = responses_events(body["model"], output, usage, fake.stream_chunks)
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
