"""The fake upstream's Messages and Responses answers: built from a chat-style assistant message
(``anthropic_message``, ``responses_output``), and streamed, a whole answer cut into the events
the provider would send, ``chunks`` deltas per text."""

from __future__ import annotations

import json
import math
import secrets
import time
from typing import Any

from proxy.testing.fake.strict_apis import thinking_block


def anthropic_message(model: str, message: dict[str, Any], usage: dict[str, Any],
                      thinking: str | None = None) -> dict[str, Any]:
    """The Messages API answer; ``thinking``: the text of the signed thinking block it opens
    with (a request with thinking on)."""
    blocks: list[dict[str, Any]] = [thinking_block(thinking)] if thinking is not None else []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"] or "{}")})
    return {"id": "msg_" + secrets.token_hex(8), "type": "message", "role": "assistant",
            "model": model, "content": blocks,
            "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn",
            "stop_sequence": None, "usage": usage}


def reasons(body: dict[str, Any]) -> bool:
    """Whether the fake's Responses answer opens with a reasoning item: the request sets
    ``reasoning``, or its model is a reasoning one (``gpt-5*``, ``o1``, ``o3``...)."""
    model = str(body.get("model") or "")
    return body.get("reasoning") is not None or model.startswith("gpt-5") or (
        len(model) > 1 and model[0] == "o" and model[1].isdigit())


def responses_output(message: dict[str, Any], body: dict[str, Any] | None = None
                     ) -> list[dict[str, Any]]:
    """The output items answering ``body``: a reasoning item first when it ``reasons`` (with
    ``encrypted_content`` when ``include`` asks for it), the text, then the calls (a custom
    tool's as ``custom_tool_call``)."""
    body = body or {}
    items: list[dict[str, Any]] = []
    if reasons(body):
        item: dict[str, Any] = {"type": "reasoning", "id": "rs_" + secrets.token_hex(8),
                                "summary": []}
        if "reasoning.encrypted_content" in (body.get("include") or []):
            item["encrypted_content"] = "enc_" + secrets.token_hex(24)
        items.append(item)
    if message.get("content"):
        items.append({"type": "message", "id": "msg_" + secrets.token_hex(8),
                      "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": message["content"],
                                   "annotations": []}]})
    custom = {t.get("name") for t in body.get("tools") or [] if t.get("type") == "custom"}
    for call in message.get("tool_calls") or []:
        name = call["function"]["name"]
        if name in custom:
            items.append({"type": "custom_tool_call", "id": "ctc_" + secrets.token_hex(8),
                          "call_id": call["id"], "name": name,
                          "input": call["function"]["arguments"], "status": "completed"})
            continue
        items.append({"type": "function_call", "id": "fc_" + secrets.token_hex(8),
                      "call_id": call["id"], "name": name,
                      "arguments": call["function"]["arguments"], "status": "completed"})
    return items


def responses_object(model: str, output: list[dict[str, Any]], usage: dict[str, Any] | None,
                     status: str = "completed") -> dict[str, Any]:
    return {"id": "resp_fake", "object": "response", "created_at": int(time.time()),
            "status": status, "model": model, "output": output, "usage": usage,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": None, "instructions": None, "metadata": {}}


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _pieces(text: str, n: int) -> list[str]:
    step = max(1, math.ceil(len(text) / max(1, n)))
    return [text[i:i + step] for i in range(0, len(text), step)]


def anthropic_events(whole: dict[str, Any], chunks: int) -> list[bytes]:
    """The streamed events of a Messages answer: ``input_transformations`` in the start's
    message, ``context_management`` in the ``message_delta`` event."""
    usage = whole["usage"]
    managed = {"context_management": whole["context_management"]} \
        if "context_management" in whole else {}
    start = {k: v for k, v in whole.items() if k != "context_management"} | {
        "content": [], "stop_reason": None, "usage": dict(usage, output_tokens=1)}
    out = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(whole["content"]):
        if block["type"] == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], chunks)]
        elif block["type"] == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p}
                      for p in _pieces(block["thinking"], chunks)]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
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
        "usage": {"output_tokens": usage["output_tokens"]}, **managed}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def responses_events(model: str, output: list[dict[str, Any]], usage: dict[str, Any],
                     chunks: int, extra: dict[str, Any] | None = None) -> list[bytes]:
    """The streamed events of a Responses answer; ``extra``: fields of the response object
    known from the start (``input_transformations``), in the created and completed ones."""
    seq = iter(range(1_000_000))
    out = [_sse("response.created", {"type": "response.created", "sequence_number": next(seq),
                                     "response": responses_object(model, [], None,
                                                                  "in_progress")
                                     | (extra or {})})]
    for i, item in enumerate(output):
        opening = dict(item, status="in_progress")
        if item["type"] == "message":
            opening["content"] = []
        elif item["type"] == "function_call":
            opening["arguments"] = ""
        elif item["type"] == "custom_tool_call":
            opening["input"] = ""
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
        elif item["type"] in ("function_call", "custom_tool_call"):
            what, field = (("function_call_arguments", "arguments")
                           if item["type"] == "function_call" else ("custom_tool_call_input",
                                                                    "input"))
            out += [_sse(f"response.{what}.delta", {
                "type": f"response.{what}.delta", "sequence_number": next(seq),
                "item_id": item["id"], "output_index": i, "delta": p})
                for p in _pieces(item[field], chunks)]
            out.append(_sse(f"response.{what}.done", {
                "type": f"response.{what}.done", "sequence_number": next(seq),
                "item_id": item["id"], "output_index": i, field: item[field]}))
        out.append(_sse("response.output_item.done", {
            "type": "response.output_item.done", "sequence_number": next(seq),
            "output_index": i, "item": item}))
    out.append(_sse("response.completed", {
        "type": "response.completed", "sequence_number": next(seq),
        "response": responses_object(model, output, usage) | (extra or {})}))
    return out
