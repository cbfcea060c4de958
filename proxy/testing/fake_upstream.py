"""An in-process fake OpenAI-compatible upstream: used by the demo, the tests and the benchmarks.

It answers chat completions (whole or streamed), ``/v1/models``, ``/v1/embeddings``, the
Anthropic Messages and OpenAI Responses APIs (``fake_apis``) and echoes any other path, records
every request it received, and can be told to misbehave (status codes, delays, broken
connections, the body shapes of ``Fault.mode``) so the proxy's fault handling can be exercised
for real. With ``strict`` (the default) it refuses on the Messages and Responses APIs what the
real ones refuse (``strict_apis``); ``refusals()`` lists what it refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from aiohttp import web

from proxy.context.stages.summary import SUMMARY_SYSTEM_PROMPT
from proxy.context.tokens.formula import REPLY_PRIMING
from proxy.testing.fake import fake_apis
from proxy.testing.fake.echoes import echo
from proxy.testing.fake.fake_apis import embed as embed  # re-exported: tests embed from here
from proxy.testing.fake.faults import (
    BAD_EVENT,
    HUGE_CHARS,
    UNFRAMED,
    answer_json,
    cut,
    misbehave,
    take,
    unframed,
    write,
)
from proxy.testing.fake.faults import Fault as Fault  # re-exported: tests script faults from here
from proxy.testing.fake.prefix_check import ReasoningBook
from proxy.testing.fake.prompt_cache import PromptCache as PromptCache  # re-exported
from proxy.testing.fake.strict_apis import Prefix

ChatResponder = Callable[[dict[str, Any]], "dict[str, Any] | Awaitable[dict[str, Any]]"]


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    usage: dict[str, Any] | None = None  # what a chat answer reported, cached tokens included
    status: int | None = None  # the status of the fake's answer, once it started
    error: str | None = None  # the body of an answer of status >= 400 (not streamed)
    refused: str | None = None  # why the fake refused it (400), in the real API's words
    dropped: int = 0  # thinking blocks or reasoning items the fake dropped (binding.drops)

    @property
    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None  # as deep as the proxy takes


_counter: Any = None


def _token_counter() -> Any:
    global _counter
    from proxy.context.tokens.counter import TokenCounter

    if _counter is None:
        _counter = TokenCounter()
    return _counter


def approx_tokens(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """Prompt tokens as a real upstream would report them (o200k_base via tiktoken)."""
    return int(_token_counter().count_messages(messages, "gpt-4o", tools))


SUMMARY_PROMPT_START = SUMMARY_SYSTEM_PROMPT[:48]
FACT = re.compile(r"\b[A-Z][A-Z0-9_]*-[A-Z0-9_-]*[0-9]+\b")


def is_summary_request(body: dict[str, Any]) -> bool:
    """Whether a chat request is the proxy's own summary call: its instructions open the
    prompt (a transcript summary) or close it (a summary riding the cached prefix)."""
    messages = body.get("messages") or [{}]
    for m in (messages[0], messages[-1]):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str) and content.startswith(SUMMARY_PROMPT_START):
            return True
    return False


def default_summarizer(body: dict[str, Any]) -> str:
    """A deterministic 'summary': every fact-like token (``CODE-123``) found in the prompt."""
    text = "\n".join(m.get("content") or "" for m in body["messages"]
                     if isinstance(m.get("content"), str))
    facts = sorted(set(FACT.findall(text)))
    return "Goal: continue the task. Key details: " + (", ".join(facts) or "none") + "."


def default_responder(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1] if body.get("messages") else {}
    content = last.get("content")
    text = content if isinstance(content, str) else ""
    return {"role": "assistant", "content": f"ack: {text[:40]}"}


# What reading a body of the wrong shape raises in the fake's handlers (a value of another type
# where an object or a list is read, nesting past Python's recursion limit).
_UNREADABLE = (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError)


@web.middleware
async def _refuse_unreadable(request: web.Request,
                             handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                             ) -> web.StreamResponse:
    """A body the fake cannot read is refused 400 in its API's shape, as a real API refuses
    one it does not accept (never a 500: that would be a fault of the upstream)."""
    try:
        return await handler(request)
    except _UNREADABLE as e:
        return fake_apis.bad_request(request.path, f"Invalid request body ({type(e).__name__}).")


@dataclass
class FakeUpstream:
    """Start with ``await fake.start()``; ``fake.base_url`` ends in ``/v1``."""

    models: dict[str, int] = field(default_factory=dict)
    responder: ChatResponder = default_responder
    summarizer: Callable[[dict[str, Any]], str] = default_summarizer
    enforce_windows: bool = False  # answer 400 context_length_exceeded like OpenAI does
    # Refuse on /v1/messages and /v1/responses what the real APIs refuse (proxy.testing.
    # strict_apis), windows of ``models`` included, in their words.
    strict: bool = True
    serves_compaction_trigger: bool = True  # fake.fake_compaction: answers compaction_trigger
    usage_scale: float = 1.0  # an upstream whose tokenizer counts more (or less) than ours
    summary_delay_s: float = 0.0  # how long a summary call takes
    count_output: bool = False  # chat answers report their text's tokens as output (else 8)
    stream_delay_s: float = 0.0
    stream_chunks: int = 4
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    cache: PromptCache = field(default_factory=PromptCache)
    record: bool = True
    base_url: str = ""
    reasoning_of: dict[str, str] = field(default_factory=dict)  # issued item id -> its rs_ id
    # Reasoning bound to its history (fake.prefix_check): signature -> prefixes; rs_ id -> prefix.
    thinking_prefixes: dict[str, set[Prefix]] = field(default_factory=dict)
    reasoning_book: ReasoningBook = field(default_factory=ReasoningBook)
    _runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024,
                              middlewares=[_refuse_unreadable])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post(fake_apis.MESSAGES, self._other_api)
        app.router.add_post(fake_apis.RESPONSES, self._other_api)
        app.router.add_post(fake_apis.COUNT_TOKENS, partial(fake_apis.count_tokens, self))
        app.router.add_route("*", "/v1/{tail:.*}", self._echo)
        app.on_response_prepare.append(fake_apis.note_answer)
        return app

    async def start(self, host: str = "127.0.0.1") -> str:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://{host}:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- helpers for tests ------------------------------------------------------------------

    def chat_requests(self) -> list[dict[str, Any]]:
        """Chat requests received, the proxy's own summary calls excluded."""
        return [b for b in self.all_chat_requests() if not is_summary_request(b)]

    def summary_requests(self) -> list[dict[str, Any]]:
        return [b for b in self.all_chat_requests() if is_summary_request(b)]

    def api_requests(self, path: str, *, summaries: bool) -> list[dict[str, Any]]:
        """Bodies received on ``path`` (``/v1/messages``, ``/v1/responses``): the proxy's own
        summary calls, or (``summaries=False``) the others."""
        bodies = [r.json for r in self.requests if r.path == path]
        return [b for b in bodies
                if is_summary_request(fake_apis.as_chat(path, b)) == summaries]

    def refusals(self) -> list[tuple[str, str]]:
        """(path, message) of every recorded request the fake refused as invalid."""
        return [(r.path, r.refused) for r in self.requests if r.refused is not None]

    @staticmethod
    def thinking_block(text: str) -> dict[str, Any]:
        """A Messages thinking block holding ``text``, signed as the fake signs its own."""
        return fake_apis.thinking_block(text)

    def all_chat_requests(self) -> list[dict[str, Any]]:
        return [r.json for r in self.requests if r.path == "/v1/chat/completions"]

    async def _record(self, request: web.Request) -> Recorded:
        rec = Recorded(request.method, request.path, request.query_string,
                       dict(request.headers), await request.read())
        if self.record:
            self.requests.append(rec)
        request[fake_apis.RECORDED] = rec
        return rec

    async def _scripted(self, request: web.Request, body: Any
                        ) -> tuple[Fault | None, web.StreamResponse | None]:
        """The fault taken for this request, and its answer when it replaces the normal one."""
        fault = take(self.faults, body, request.path)
        return fault, await misbehave(request, fault, echo) if fault is not None else None

    # --- handlers ---------------------------------------------------------------------------

    def measure(self, chat: dict[str, Any]) -> tuple[int, list[int], int]:
        """A chat-shaped request's prompt tokens as the fake bills them, its per-message
        counts and its tools' tokens."""
        counter = _token_counter()
        per_message = counter.message_token_list(chat["messages"], "gpt-4o")
        tools_tokens = counter.tools_tokens(chat.get("tools"), "gpt-4o")
        prompt = round((sum(per_message) + tools_tokens + REPLY_PRIMING) * self.usage_scale)
        return prompt, per_message, tools_tokens

    async def respond(self, request: web.Request, chat: dict[str, Any],
                      fault: Fault | None) -> dict[str, Any]:
        """The assistant message for a chat-shaped request: a summary for the proxy's own
        summary calls, else the responder's."""
        if is_summary_request(chat):
            await asyncio.sleep(self.summary_delay_s)
            message: dict[str, Any] = {"role": "assistant", "content": self.summarizer(chat)}
        else:
            answer = self.responder(chat)
            message = await answer if asyncio.iscoroutine(answer) else answer  # type: ignore[assignment]
        assert isinstance(message, dict)
        if fault is not None and fault.mode == "huge":
            message = {"role": "assistant", "content": "0123456789abcdef" * (HUGE_CHARS // 16)}
        return message

    def cached(self, request: web.Request, chat: dict[str, Any], measured: tuple[int, list[int],
               int], *, route: str = "", mode: Any = None, head: int = 0) -> int:
        """What the emulated prompt cache serves of this prompt (per key, model and ``route``;
        see ``PromptCache.cached_tokens`` for ``mode`` and ``head``)."""
        prompt, per_message, tools_tokens = measured
        key = request.headers.get("Authorization") or request.headers.get("x-api-key") or ""
        return min(prompt, self.cache.cached_tokens(key, chat, per_message, tools_tokens,
                                                    route=route, mode=mode, head=head))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        rec = await self._record(request)
        body = rec.json
        fault, early = await self._scripted(request, body)
        if early is not None:
            return early
        measured = self.measure(body)
        prompt_tokens = measured[0]
        window = self.models.get(body.get("model", ""))
        if self.enforce_windows and window and prompt_tokens > window:
            return web.json_response({"error": {
                "message": f"This model's maximum context length is {window} tokens. However, "
                           f"your messages resulted in {prompt_tokens} tokens.",
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}, status=400)
        message = await self.respond(request, body, fault)
        cached = self.cached(request, body, measured,
                             route=str(body.get("prompt_cache_key") or ""))
        text = message.get("content")  # output: 8 tokens, or the text's (count_output)
        output = _token_counter().text_tokens(text, "gpt-4o") \
            if self.count_output and isinstance(text, str) else 8
        usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": output,
                                 "total_tokens": prompt_tokens + output,
                                 "prompt_tokens_details": {
                                     "cached_tokens": cached,
                                     "cache_write_tokens": self.cache.written(prompt_tokens,
                                                                              cached)}}
        rec.usage = usage
        if body.get("stream"):
            return await self._stream(request, self._events(body, message, usage), fault)
        return await answer_json(request, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"], "choices": [{"index": 0, "message": message,
                                                 "finish_reason": _finish(message)}],
            "usage": usage}, fault)

    async def _other_api(self, request: web.Request) -> web.StreamResponse:
        return await fake_apis.answer(self, request)

    async def _stream(self, request: web.Request, events: list[bytes], fault: Fault | None
                      ) -> web.StreamResponse:
        """The events, ``stream_delay_s`` apart (none before the last), shaped by the fault."""
        mode = fault.mode if fault is not None else ""
        if mode in UNFRAMED:
            return unframed(request, "text/event-stream", events[0], mode)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           **(fault.headers if fault else {})})
        await resp.prepare(request)
        for i, event in enumerate(events):
            if i == 1 and mode == "reset":
                return cut(request, resp)
            if i == 1 and mode == "early_end":  # a clean end of the body, the stream unfinished
                break
            if i == 1 and mode == "bad_sse":
                await resp.write(BAD_EVENT)
            await write(resp, event, mode)
            if self.stream_delay_s and i < len(events) - 2:
                await asyncio.sleep(self.stream_delay_s)
        await resp.write_eof()
        return resp

    def _events(self, body: dict[str, Any], message: dict[str, Any], usage: dict[str, Any]
                ) -> list[bytes]:
        """One event per delta, then the finish (and usage) events with ``[DONE]`` as one."""
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body["model"]}
        text = message.get("content") or ""
        n = max(1, self.stream_chunks)
        step = max(1, math.ceil(len(text) / n))
        pieces = [text[i:i + step] for i in range(0, len(text), step)] or [""]
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": pieces[0]}]
        deltas += [{"content": p} for p in pieces[1:]]
        if message.get("tool_calls"):
            deltas.append({"tool_calls": [dict(c, index=i)
                                          for i, c in enumerate(message["tool_calls"])]})
        chunks = [dict(base, choices=[{"index": 0, "delta": d, "finish_reason": None}])
                  for d in deltas]
        chunks.append(dict(base, choices=[{"index": 0, "delta": {},
                                           "finish_reason": _finish(message)}]))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(dict(base, choices=[], usage=usage))
        events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
        tail = len(deltas)
        return [*events[:tail], b"".join(events[tail:]) + b"data: [DONE]\n\n"]

    async def _models(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        fault, early = await self._scripted(request, None)
        if early is not None:
            return early
        return await answer_json(request, {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "fake",
             "context_length": window} for name, window in self.models.items()]}, fault)

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        rec = await self._record(request)
        body = rec.json
        fault, early = await self._scripted(request, body)
        if early is not None:
            return early
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": embed(str(t))}
                for i, t in enumerate(inputs)]
        return await answer_json(request, {"object": "list", "data": data,
                                           "model": body.get("model"),
                                           "usage": {"prompt_tokens": 0, "total_tokens": 0}},
                                 fault)

    async def _echo(self, request: web.Request) -> web.StreamResponse:
        rec = await self._record(request)
        _, early = await self._scripted(request, None)
        if early is not None:
            return early
        status = int(request.query.get("status", "200"))
        if request.query.get("stream"):
            resp = web.StreamResponse(status=status,
                                      headers={"Content-Type": "application/octet-stream"})
            await resp.prepare(request)
            for i in range(int(request.query["stream"])):
                await resp.write(f"part {i}\n".encode())
                await asyncio.sleep(self.stream_delay_s)
            await resp.write_eof()
            return resp
        return web.json_response({
            "method": rec.method, "path": rec.path, "query": rec.query,
            "body_sha256": hashlib.sha256(rec.body).hexdigest(), "body_length": len(rec.body),
        }, status=status)


def _finish(message: dict[str, Any]) -> str:
    return "tool_calls" if message.get("tool_calls") else "stop"
