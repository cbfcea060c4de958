"""Background preparation across replicas (SPEC sections 5 and 9): three replicas as separate
processes on one PostgreSQL schema prepare one summary per conversation however many of its
requests cross the prepare point at once, apply it once, and a replica killed while preparing
leaves nothing stored. Always on PostgreSQL (as ``test_replicas.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from pgtest import fresh_schema

from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream, approx_tokens
from proxy.testing.replicas import Replicas

MODEL = "gpt-4o-w16k"
WINDOW = 16_000
SPEC = agent.AgentSpec(seed=4, output_tokens=(600, 900), thought_words=(5, 10))
POLICIES = f"""defaults:
  masking: {{enabled: false}}
  compaction: {{summary_timeout_s: 10, prepare_ratio: 0.7}}
  models: {{{MODEL}: {WINDOW}}}
"""
GUARD_S = 30  # not a timing check: a preparation that never lands fails instead of hanging


@pytest.fixture
def replicas(tmp_path: Path, database_url: str | None) -> Iterator[Replicas]:
    with contextlib.ExitStack() as stack:
        url = database_url or stack.enter_context(fresh_schema())
        yield stack.enter_context(Replicas(tmp_path, url, 3, fake=FakeUpstream(),
                                           policies=POLICIES))


def requests_between(low: float, high: float) -> list[list[dict[str, Any]]]:
    """The session's requests (each ends before an assistant message) whose prompt is between
    ``low`` and ``high`` × window."""
    messages = agent.conversation(SPEC, 40)
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return [messages[:e] for e in ends
            if low * WINDOW < approx_tokens(messages[:e], agent.TOOLS) <= high * WINDOW]


async def send(replicas: Replicas, key: str, bodies: list[list[dict[str, Any]]],
               conversation: str, on: list[int] | None = None) -> list[Any]:
    """``bodies`` at once, round robin over the replicas (``on``: these replicas)."""
    clients = [openai.AsyncOpenAI(base_url=replicas.url(i), api_key=key, max_retries=0)
               for i in range(3)]
    targets = on or [replicas.next_index() for _ in bodies]
    try:
        return list(await asyncio.gather(*(
            clients[targets[n % len(targets)]].chat.completions.with_raw_response.create(
                model=MODEL, messages=body, tools=agent.TOOLS,  # type: ignore[arg-type]
                extra_headers={"X-Conversation-Id": conversation})
            for n, body in enumerate(bodies))))
    finally:
        for c in clients:
            await c.close()


def prepared_rows(replicas: Replicas) -> int:
    assert replicas.store is not None
    return int(replicas.store.read_one("SELECT COUNT(*) FROM prepared_summaries")[0])


def wait_for_prepared(replicas: Replicas) -> None:
    deadline = time.monotonic() + GUARD_S
    while prepared_rows(replicas) == 0:
        assert time.monotonic() < deadline, "no summary was prepared"
        time.sleep(0.05)


def dividers(replicas: Replicas, key: str, conversation: str, on: int = 0
             ) -> list[dict[str, Any]]:
    with openai.OpenAI(base_url=replicas.url(on), api_key=key, max_retries=0) as c:
        got: Any = c.get(f"/conversations/{conversation}/dividers", cast_to=object)
    return list(got["data"])


def test_twenty_requests_across_the_prepare_point_prepare_once(replicas: Replicas) -> None:
    replicas.fake.summary_delay_s = 1.0  # they all arrive while it is being prepared
    key = replicas.create_key()
    bodies = requests_between(0.6, 0.95)
    assert len(bodies) >= 4
    twenty = [bodies[n % len(bodies)] for n in range(20)]
    answers = asyncio.run(send(replicas, key, twenty, "across"))
    assert all(a.status_code == 200 for a in answers)
    assert {a.headers["X-Context-Summary-Wait-Ms"] for a in answers} == {"0"}
    first = [a.headers["X-Context-Compaction"] for a in answers]
    if "auto" not in first:  # (on a loaded machine the last few may come after it is made)
        wait_for_prepared(replicas)
    assert len(replicas.fake.summary_requests()) == 1  # one preparation
    # The requests past the trigger apply it, on whichever replica: one divider.
    past = [b for b in bodies if approx_tokens(b, agent.TOOLS) > 0.8 * WINDOW][-1]
    applied = asyncio.run(send(replicas, key, [past] * 6, "across", on=[0, 1, 2]))
    assert all(a.status_code == 200 for a in applied)
    outcomes = first + [a.headers["X-Context-Compaction"] for a in applied]
    assert outcomes.count("auto") == 1
    assert set(outcomes) <= {"none", "auto", "reused"}
    # (one that read the conversation just before another replica applied it goes on
    # uncompacted: it fits the window; it neither waits nor prepares again)
    assert {a.headers["X-Context-Summary-Wait-Ms"] for a in applied} == {"0"}
    assert len(dividers(replicas, key, "across")) == 1
    assert len(replicas.fake.summary_requests()) == 1
    assert prepared_rows(replicas) == 0  # applied, so no longer waiting


def test_a_replica_killed_while_preparing_leaves_nothing_stored(replicas: Replicas) -> None:
    replicas.fake.summary_delay_s = 5.0  # still preparing when it is killed
    key = replicas.create_key()
    zone = requests_between(0.72, 0.8)[0]
    answer = asyncio.run(send(replicas, key, [zone], "killed", on=[0]))[0]
    assert answer.status_code == 200
    deadline = time.monotonic() + GUARD_S
    while not replicas.fake.summary_requests():
        assert time.monotonic() < deadline, "no preparation started"
        time.sleep(0.02)
    replicas.kill(0)
    assert prepared_rows(replicas) == 0
    replicas.fake.summary_delay_s = 0.0
    # The next requests prepare again (once the dead replica's lease has run out) and apply it.
    past = requests_between(0.8, 0.95)[-1]
    deadline = time.monotonic() + GUARD_S
    outcomes: list[str] = []
    while "auto" not in outcomes:
        assert time.monotonic() < deadline, f"never compacted again: {outcomes}"
        got = asyncio.run(send(replicas, key, [past], "killed", on=[1]))[0]
        assert got.status_code == 200
        outcomes.append(got.headers["X-Context-Compaction"])
        time.sleep(0.2)
    assert len(dividers(replicas, key, "killed", on=1)) == 1
