"""The proxy's own chat calls (``proxy.upstream.completion``) against the fake upstream: the body
sent is exactly the payload (not streamed), the answer's parts and usage are read, and an
error status or a body that is no chat completion fails as ``CompletionFailed``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from proxy.errors import ApiError
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.upstream.client import Upstream
from proxy.upstream.completion import Completion, CompletionFailed, complete, parse_completion

PAYLOAD = {"model": "gpt-4o", "messages": [{"role": "user", "content": "summarize CODE-12"}]}


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeUpstream, Upstream]]:
    fake = FakeUpstream()
    upstream = Upstream(await fake.start(), "sk-own", 5.0)
    yield fake, upstream
    await upstream.close()
    await fake.stop()


def test_parse_completion_reads_content_reason_and_usage() -> None:
    raw = orjson.dumps({"choices": [{"message": {"content": "done"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 120, "total_tokens": 130,
                                  "completion_tokens": 10, "prompt_tokens_details": {
                                      "cached_tokens": 64, "cache_write_tokens": 32}}})
    assert parse_completion(raw) == Completion("done", "stop", 120, 64, 130, 32, 10)


def test_parse_completion_tolerates_odd_fields_and_refuses_what_is_no_completion() -> None:
    odd = orjson.dumps({"choices": [{"message": {"content": 3}, "finish_reason": None}],
                        "usage": {"prompt_tokens": True, "prompt_tokens_details": None}})
    assert parse_completion(odd) == Completion(None, None, 0, 0, 0, 0, 0)
    for raw in (b"not json", b'{"choices": []}', b'{"id": 1}', b"[]"):
        with pytest.raises(CompletionFailed):
            parse_completion(raw)


async def test_complete_sends_the_payload_whole_with_the_key(
        served: tuple[FakeUpstream, Upstream]) -> None:
    fake, upstream = served
    answer = await complete(upstream, "sk-call", PAYLOAD, {"X-Extra": "1"})
    assert answer.content == "ack: summarize CODE-12" and answer.prompt_tokens > 0
    sent = fake.requests[-1]
    assert sent.json == {**PAYLOAD, "stream": False}
    assert sent.headers["Authorization"] == "Bearer sk-call"
    assert sent.headers["Accept-Encoding"] == "identity" and sent.headers["X-Extra"] == "1"


async def test_an_error_status_fails_the_call(served: tuple[FakeUpstream, Upstream]) -> None:
    fake, upstream = served
    fake.faults.append(Fault(status=500))
    with pytest.raises(CompletionFailed, match="answered 500"):
        await complete(upstream, None, PAYLOAD)
    fake.faults.append(Fault(status=200, mode="invalid_json"))
    with pytest.raises(CompletionFailed, match="not a chat completion"):
        await complete(upstream, None, PAYLOAD)


async def test_a_broken_answer_is_a_502(served: tuple[FakeUpstream, Upstream]) -> None:
    fake, upstream = served
    fake.faults.append(Fault(status=200, mode="reset"))
    with pytest.raises(ApiError) as info:
        await complete(upstream, None, PAYLOAD)
    assert (info.value.status, info.value.code) == (502, "upstream_broken")
