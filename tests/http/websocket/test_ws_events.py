"""The Responses WebSocket mode's pure pieces: SSE data split into events in any pieces, the
socket's history behind ``previous_response_id``, error events in the wrapped shape."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.http.websocket import ws_events as ev

STREAM = (b": a comment\n\nevent: response.created\ndata: {\"type\": \"response.created\"}\n\n"
          b"event: response.output_text.delta\r\ndata: {\"type\":\r\ndata: \"x\"}\r\n\r\n"
          b"data: {\"type\": \"response.completed\"}")


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=6))
def test_sse_data_is_split_into_events_whatever_the_pieces(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    parser = ev.SseEvents()
    events = [e for a, b in itertools.pairwise(bounds) for e in parser.feed(STREAM[a:b])]
    events += parser.flush()
    assert events == [b'{"type": "response.created"}', b'{"type":\n"x"}',
                      b'{"type": "response.completed"}']


def test_a_follow_up_naming_the_last_response_gets_its_whole_history() -> None:
    chain = ev.Chain()
    chain.completed("resp_1", ev.as_items("hi"), [{"type": "function_call", "call_id": "c"}])
    body = {"previous_response_id": "resp_1", "input": [{"type": "function_call_output"}]}
    assert chain.expand(body)
    assert body == {"input": [{"type": "message", "role": "user", "content": "hi"},
                              {"type": "function_call", "call_id": "c"},
                              {"type": "function_call_output"}]}
    other = {"previous_response_id": "resp_0", "input": "x"}
    assert not chain.expand(other) and other["previous_response_id"] == "resp_0"


def test_the_items_a_response_added_are_those_of_its_done_events() -> None:
    answer = ev.Answer()
    for data in (b'{"type": "response.output_text.delta", "delta": "\\"error\\""}',
                 b'{"type": "response.output_item.done", "item": {"id": "a"}}',
                 b'{"type": "response.completed", "response": {"id": "r", "output": []}}'):
        answer.see(*ev.event_type(data))
    assert (answer.ended, answer.response_id, answer.output_items()) == (
        "response.completed", "r", [{"id": "a"}])


def test_errors_are_wrapped_with_a_status() -> None:
    wrapped = ev.stream_error({"type": "error", "code": "server_error", "message": "boom"})
    assert wrapped["status"] == 502 and wrapped["error"]["code"] == "server_error"
    plain = ev.answer_error_event(503, b"<html>", {"Retry-After": "3", "Content-Type": "x"})
    assert plain["status"] == 503 and plain["headers"] == {"Retry-After": "3"}
    assert plain["error"]["type"] == "upstream_error"
    assert json.dumps(plain)


def test_the_socket_headers_stay_on_the_socket() -> None:
    out = ev.upstream_headers({"Sec-WebSocket-Key": "k", "Upgrade": "websocket",
                            "OpenAI-Beta": "responses_websockets=2026-02-06, other=1",
                            "originator": "codex_exec"})
    assert dict(out) == {"OpenAI-Beta": "other=1", "originator": "codex_exec",
                         "Content-Type": "application/json"}
    assert ev.parse_message('{"type": "response.create"}', 100) == {"type": "response.create"}
