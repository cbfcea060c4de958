"""Seeded fuzzing of the request parser and the chat route: bad input is always a clean 4xx.

``FUZZ_EXAMPLES`` sets how many cases each test runs (a few thousand for the parser and a few
hundred through the route by default; more on demand). Derandomized: the same cases every run.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgtest import fresh_schema, on_postgres

from proxy.context.checked import CheckedLists
from proxy.errors import ApiError
from proxy.http.parse import check_chat, parse_json_object
from proxy.testing.harness import Harness

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2000"))

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) |
           st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                      st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function",
                         "robot", ""])
call = st.fixed_dictionaries({"id": st.text(max_size=6), "type": st.just("function"),
                              "function": st.fixed_dictionaries({
                                  "name": st.text(max_size=8), "arguments": st.text(max_size=8)})})
message = st.fixed_dictionaries(
    {"role": ROLES | values},
    optional={"content": st.none() | st.text(max_size=30) | st.lists(values, max_size=3),
              "tool_calls": st.lists(call, max_size=2) | values,
              "tool_call_id": st.text(max_size=6) | values, "name": st.text(max_size=6) | values})
requests = st.fixed_dictionaries(
    {"model": st.just("gpt-4o") | values, "messages": st.lists(message, max_size=6) | values},
    optional={"stream": st.booleans() | values, "tools": st.lists(values, max_size=2) | values,
              "temperature": values})


def bodies() -> st.SearchStrategy[bytes]:
    encoded = requests.map(lambda r: json.dumps(r).encode())
    raw = st.binary(max_size=80)
    deep = st.integers(1_000, 30_000).map(lambda n: b"[" * n + b"]" * n)
    surrogate = st.sampled_from([b'"\\ud800"', b'"\\udc00\\ud800"', b'"x\\ud834"'])
    bad_text = surrogate.map(lambda s: b'{"model": "gpt-4o", "messages": [{"role": "user", '
                                       b'"content": ' + s + b'}]}')
    return encoded | raw | deep | bad_text | values.map(lambda v: json.dumps(v).encode())


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=bodies())
def test_the_parser_accepts_or_refuses_cleanly(body: bytes) -> None:
    try:
        chat = check_chat(body, parse_json_object(body), CheckedLists())
    except ApiError as e:
        assert e.status == 400 and e.message
        return
    assert chat.messages and isinstance(chat.model, str)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
           ) -> Iterator[tuple[Harness, str]]:
    with ExitStack() as stack:
        url = stack.enter_context(fresh_schema()) if on_postgres(pytestconfig) else ""
        h = Harness(Path(tmp_path_factory.mktemp("fuzz")),
                    env={"CONTEXT_PROXY_DATABASE_URL": url}).start()
        stack.callback(h.stop)
        yield h, h.create_key("acme")


def post(h: Harness, key: str, body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{h.base_url}/chat/completions", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()


def conversations(h: Harness) -> int:
    return int(h.state.store.read_one("SELECT COUNT(*) FROM conversations")[0])


@settings(max_examples=max(50, EXAMPLES // 8), derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(body=bodies())
@pytest.mark.usefixtures("database_url")
def test_the_chat_route_never_answers_5xx(served: tuple[Harness, str], body: bytes) -> None:
    h, key = served
    before = conversations(h)
    status, answer = post(h, key, body)
    assert status < 500, answer[:300]
    assert b"Traceback" not in answer
    if status >= 400:
        error: dict[str, Any] = orjson.loads(answer)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        assert conversations(h) == before  # refused input stores nothing
