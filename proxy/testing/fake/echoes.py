"""The fake's answers that give the request's key away (the ``echo*`` fault modes), in each
API's shape, whole, dripped, huge or gzip-compressed: what the proxy's scrubbers must catch."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

from aiohttp import web

from proxy.testing.fake import fake_apis, fake_events
from proxy.testing.fake.faults import HUGE_CHARS, Fault


def echo_events(path: str, key: str) -> list[bytes]:
    """A whole stream of the API at ``path`` whose text is ``you sent <key>``, in one delta
    (a key a model spells out over several deltas is out of any scrubber's reach)."""
    message = {"role": "assistant", "content": f"you sent {key}"}
    if path in (fake_apis.MESSAGES, fake_apis.RESPONSES):
        usage = fake_apis.usage_for(path, 8, 0)
        if path == fake_apis.MESSAGES:
            return fake_events.anthropic_events(
                fake_events.anthropic_message("m", message, usage), 1)
        return fake_events.responses_events("m", fake_events.responses_output(message), usage, 1)
    chunk = {"id": "chatcmpl-echo", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"content": message["content"]},
                          "finish_reason": None}]}
    return [b"data: " + json.dumps(chunk).encode() + b"\n\n", b"data: [DONE]\n\n"]


def echo_answer(path: str, key: str) -> dict[str, Any]:
    """A whole answer of the Messages or Responses API whose text is ``you sent <key>``."""
    message = {"role": "assistant", "content": f"you sent {key}"}
    usage = fake_apis.usage_for(path, 8, 0)
    if path == fake_apis.MESSAGES:
        return fake_events.anthropic_message("m", message, usage)
    return fake_events.responses_object("m", fake_events.responses_output(message), usage)


async def echo_stream(request: web.Request, key: str) -> web.StreamResponse:
    """A gzip-compressed stream of the request's API whose text holds ``key``, one compressed
    piece per event (so each event is readable as it comes)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Content-Encoding": "gzip"})
    await resp.prepare(request)
    packer = zlib.compressobj(wbits=31)  # gzip framing
    for event in echo_events(request.path, key):
        await resp.write(packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH))
    await resp.write(packer.flush())
    await resp.write_eof()
    return resp


async def echo(request: web.Request, fault: Fault) -> web.StreamResponse:
    """An answer that gives the request's key away, shaped by ``fault.mode`` (see ``Fault``)."""
    key = request.headers.get("x-api-key") or \
        request.headers.get("Authorization", "").removeprefix("Bearer ")  # Anthropic's; OpenAI's
    if fault.mode == "echo_gzip_stream":
        return await echo_stream(request, key)
    if fault.status >= 400:
        payload: Any = {"error": {"message": f"invalid key {key}", "type": "auth_error",
                                  "param": None, "code": None}}
    elif request.path.endswith("/chat/completions"):
        payload = {"id": "chatcmpl-echo", "object": "chat.completion", "model": "m",
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {
                       "role": "assistant", "content": f"you sent {key}"}}]}
    elif request.path.endswith(("/messages", "/responses")):
        payload = echo_answer(request.path, key)
    else:
        payload = {"object": "list", "data": [], "debug": {"authorization": key}}
    if fault.mode == "echo_huge":
        payload["padding"] = "x" * HUGE_CHARS
        payload["again"] = key  # the key after more than a MiB
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "X-Debug-Authorization": f"Bearer {key}"}
    if fault.mode == "echo_gzip":
        data, headers["Content-Encoding"] = gzip.compress(data), "gzip"
    resp = web.StreamResponse(status=fault.status, headers=headers)
    if fault.mode != "echo_drip":
        resp.content_length = len(data)
    await resp.prepare(request)
    step = 7 if fault.mode == "echo_drip" else len(data)  # a key split across many chunks
    for i in range(0, len(data), step):
        await resp.write(data[i:i + step])
    await resp.write_eof()
    return resp
