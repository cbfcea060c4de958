"""The fake's key-echoing answers (``proxy.testing.fake.echoes``): each API's own shape, with the
request's key spelled out in one piece, so a scrubber that misses it is caught."""

from __future__ import annotations

import json

import pytest

from proxy.testing.fake import fake_apis
from proxy.testing.fake.echoes import echo_answer, echo_events

KEY = "sk-upstream-0123456789"


@pytest.mark.parametrize("path", ["/v1/chat/completions", fake_apis.MESSAGES,
                                  fake_apis.RESPONSES])
def test_a_stream_of_each_api_carries_the_key_in_one_event(path: str) -> None:
    events = echo_events(path, KEY)
    assert all(e.startswith((b"data: ", b"event: ")) and e.endswith(b"\n\n") for e in events)
    assert any(f"you sent {KEY}".encode() in e for e in events)  # whole, never split
    last = events[-1]
    if path == fake_apis.MESSAGES:
        assert b"message_stop" in last
    elif path == fake_apis.RESPONSES:
        assert b"response.completed" in last
    else:
        assert last == b"data: [DONE]\n\n"


def test_a_whole_answer_is_in_the_apis_shape() -> None:
    message = echo_answer(fake_apis.MESSAGES, KEY)
    assert message["type"] == "message" and message["content"][0]["text"] == f"you sent {KEY}"
    response = echo_answer(fake_apis.RESPONSES, KEY)
    assert response["object"] == "response" and KEY in json.dumps(response["output"])
