"""Any managed API at the upstream (``proxy.apis.calls``): the usage of a streamed answer from
its data lines, the API headers a client's request carries, and one summary call of an API
against the fake upstream (an answer not in the API's shape fails as ``ApiCallFailed``)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from proxy.apis import messages, responses
from proxy.apis.calls import ApiCallFailed, ApiUsageScanner, api_headers, call
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.upstream.client import Upstream
from proxy.upstream.completion import CompletionFailed
from proxy.upstream.usage import UpstreamUsage


def test_a_streams_usage_takes_the_largest_prompt_and_output() -> None:
    scanner = ApiUsageScanner(messages.API)
    for line in (b'data: {"type": "message_start", "message": {"usage": {"input_tokens": 10, '
                 b'"cache_read_input_tokens": 50, "output_tokens": 1}}}',
                 b'data: {"type": "content_block_delta", "delta": {"text": "x"}}',
                 b'event: message_delta',
                 b'data: {"type": "message_delta", "usage": {"output_tokens": 43}}',  # no input
                 b'data: {"type": "message_delta", "usage": {"input_tokens": 10, '
                 b'"cache_read_input_tokens": 50, "output_tokens": 42}}'):
        scanner.line(line)
    assert scanner.usage == UpstreamUsage(60, 50, 0, 42)
    other = ApiUsageScanner(responses.API)
    other.line(b'data: {"type": "response.completed", "response": {"usage": '
               b'{"input_tokens": 70, "output_tokens": 5}}}')
    assert other.usage == UpstreamUsage(70, 0, 0, 5)


def test_a_streams_usage_keeps_the_reasoning_the_provider_dropped() -> None:
    """Anthropic lists the dropped blocks in ``message_start``; a later ``message_delta``
    with the same prompt does not forget them. The Responses API in ``response.completed``."""
    scanner = ApiUsageScanner(messages.API)
    for line in (b'data: {"type": "message_start", "message": {"input_transformations": ['
                 b'{"type": "thinking_block_dropped", "reason": "prefix_mismatch"}, '
                 b'{"type": "thinking_block_dropped", "reason": "prefix_mismatch"}], '
                 b'"usage": {"input_tokens": 10, "output_tokens": 1}}}',
                 b'data: {"type": "message_delta", "usage": {"input_tokens": 10, '
                 b'"output_tokens": 42}}'):
        scanner.line(line)
    assert scanner.usage == UpstreamUsage(10, 0, 0, 42, dropped=2)
    other = ApiUsageScanner(responses.API)
    other.line(b'data: {"type": "response.completed", "response": {"input_transformations": '
               b'[{"type": "reasoning_dropped", "reason": "prefix_mismatch", "item_id": "rs_1"}]'
               b', "usage": {"input_tokens": 70, "output_tokens": 5}}}')
    assert other.usage.dropped == 1


@pytest.mark.parametrize("body", [
    b'{"usage": {"input_tokens": 3}}',
    b'{"input_transformations": [], "usage": {"input_tokens": 3}}',
    b'{"reason": "prefix_mismatch", "usage": {"input_tokens": 3}}',  # not in the list
])
def test_an_answer_without_dropped_reasoning_counts_none(body: bytes) -> None:
    assert messages.usage(body).dropped == 0 and responses.usage(body).dropped == 0


def test_api_headers_join_repeated_versions_and_betas() -> None:
    incoming = CIMultiDict([("anthropic-beta", "a"), ("anthropic-beta", "b"),
                            ("anthropic-version", "2023-06-01"), ("x-other", "1")])
    assert api_headers(incoming) == {"anthropic-beta": "a, b",
                                     "anthropic-version": "2023-06-01"}
    assert api_headers({"OpenAI-Beta": "responses=v1"}) == {"openai-beta": "responses=v1"}


async def test_a_summary_call_in_the_messages_api(upstream_client: tuple[FakeUpstream, Upstream]
                                                  ) -> None:
    fake, up = upstream_client
    payload = {"model": "claude-x", "max_tokens": 64,
               "messages": [{"role": "user", "content": "summarize CODE-7"}]}
    answer = await call(up, messages.API, "sk-ant", payload, {"X-Context-Proxy-Org": "acme"})
    assert answer.text and not answer.tool_call and answer.usage.prompt > 0
    sent = fake.requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == "sk-ant"
    assert sent.headers["X-Context-Proxy-Org"] == "acme" and sent.json["stream"] is False


async def test_an_answer_not_in_the_apis_shape_fails(upstream_client: tuple[FakeUpstream, Upstream]
                                                     ) -> None:
    fake, up = upstream_client
    fake.faults.append(Fault(status=200, body={"not": "a message"}, path="/v1/messages"))
    payload = {"model": "claude-x", "max_tokens": 64,
               "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(ApiCallFailed, match="not a messages answer"):
        await call(up, messages.API, None, payload)
    fake.faults.append(Fault(status=500, path="/v1/messages"))
    with pytest.raises(CompletionFailed, match="answered 500"):
        await call(up, messages.API, None, payload)
