"""The streamed events of the fake upstream's Messages and Responses answers: a whole answer
cut into the events the provider would send, ``chunks`` deltas per text."""

from __future__ import annotations

import json
import math
import time
from typing import Any


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
    usage = whole["usage"]
    start = dict(whole, content=[], stop_reason=None,
                 usage=dict(usage, output_tokens=1))
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
        "response": responses_object(model, output, usage)}))
    return out
