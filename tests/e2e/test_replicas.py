"""Scale-out (SPEC section 9): three replicas as separate processes on one PostgreSQL schema,
in front of one in-process fake upstream, driven by a round-robin client.

Always on PostgreSQL: replicas need a server they share (SQLite is one file for one process).
The ``--store=postgres`` run gives them its schema; the SQLite run a fresh schema of its own."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pgtest import fresh_schema

from proxy.store import leases
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replicas import ROOT, Replicas

MODEL = "gpt-4o-w16k"
SPEC = agent.AgentSpec(seed=4, output_tokens=(600, 900), thought_words=(5, 10))
SUMMARY_TIMEOUT_S = 3.0  # ample for a 0.5 s summary call on a loaded machine
POLICIES = f"""defaults:
  masking: {{enabled: false}}
  compaction: {{summary_model: summarizer, summary_timeout_s: {SUMMARY_TIMEOUT_S},
               prepare_ratio: 1.0}}
  models: {{{MODEL}: 16000, summarizer: 1000000}}
"""
ADMIN_TOKEN = "admin-replicas-0123456789"
WITHIN_S = 2.0  # SPEC: revocations and policy writes reach every replica within 2 s


@pytest.fixture
def replicas(tmp_path: Path, database_url: str | None) -> Iterator[Replicas]:
    with contextlib.ExitStack() as stack:
        url = database_url or stack.enter_context(fresh_schema())
        fake = FakeUpstream()
        yield stack.enter_context(Replicas(tmp_path, url, 3, fake=fake, policies=POLICIES,
                                           env={"CONTEXT_PROXY_ADMIN_TOKEN": ADMIN_TOKEN}))


def turn_ends(messages: list[dict[str, Any]]) -> list[int]:
    """Where each request of the scripted session ends (before each assistant message)."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def chat(url: str, key: str, messages: list[dict[str, Any]], conversation: str) -> Any:
    with openai.OpenAI(base_url=url, api_key=key, max_retries=0) as c:
        return c.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=agent.TOOLS,
            extra_headers={"X-Conversation-Id": conversation})


def dividers(url: str, key: str, conversation: str) -> list[dict[str, Any]]:
    with openai.OpenAI(base_url=url, api_key=key, max_retries=0) as c:
        got = c.get(f"/conversations/{conversation}/dividers", cast_to=object)
    return list(got["data"])  # type: ignore[index]


def test_twenty_requests_across_three_replicas_make_one_summary(replicas: Replicas) -> None:
    replicas.fake.summary_delay_s = 0.5  # they all arrive while it is being made
    key = replicas.create_key()
    messages = agent.conversation(SPEC, 30)[:turn_ends(agent.conversation(SPEC, 30))[-1]]

    async def twenty() -> list[Any]:
        clients = [openai.AsyncOpenAI(base_url=replicas.url(i), api_key=key, max_retries=0)
                   for i in range(3)]
        try:
            return list(await asyncio.gather(*(
                clients[replicas.next_index()].chat.completions.with_raw_response.create(
                    model=MODEL, messages=messages, tools=agent.TOOLS,
                    extra_headers={"X-Conversation-Id": "one-conversation"})
                for _ in range(20))))
        finally:
            for c in clients:
                await c.close()

    answers = asyncio.run(twenty())
    assert len(replicas.fake.summary_requests()) == 1
    outcomes = sorted(a.headers["X-Context-Compaction"] for a in answers)
    assert outcomes == ["auto"] + ["reused"] * 19
    sent = [b["messages"] for b in replicas.fake.chat_requests()]
    assert len(sent) == 20 and all(s == sent[0] for s in sent)
    assert len(sent[0]) < len(messages)  # the rewritten list, the summary in it
    assert any("Goal: continue the task" in str(m.get("content")) for m in sent[0])
    assert len({a.headers["X-Context-Tokens-After"] for a in answers}) == 1
    assert len(dividers(replicas.url(2), key, "one-conversation")) == 1


def compaction_leases(replicas: Replicas) -> int:
    assert replicas.store is not None
    row = replicas.store.read_one("SELECT COUNT(*) FROM leases WHERE name LIKE 'compaction %' "
                                  "AND expires_at > ?", [time.time()])
    return int(row[0])


def turn(replicas: Replicas, key: str, messages: list[dict[str, Any]], arm: bool) -> Any:
    """One turn of the session on the next replica. ``arm``: should the turn make a summary
    call, SIGKILL that replica while the call is in flight (the turn then returns None)."""
    i = replicas.next_index()
    before = len(replicas.fake.summary_requests())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(chat, replicas.url(i), key, messages, "sixty")
        while not pending.done():
            if arm and len(replicas.fake.summary_requests()) > before:
                replicas.kill(i)
                with pytest.raises(openai.APIConnectionError):
                    pending.result(30)
                return None
            time.sleep(0.01)
        return pending.result()


def test_a_replica_killed_during_a_summary_blocks_nothing_beyond_its_lease(
        replicas: Replicas) -> None:
    key = replicas.create_key()
    full = agent.conversation(SPEC, 60)
    made: list[str] = []  # the dividers the client was told of, in order
    killed = False
    for end in turn_ends(full):
        arm = not killed and len(made) >= 2  # two compactions in, the next one loses its replica
        replicas.fake.summary_delay_s = 1.0 if arm else 0.0
        answer = turn(replicas, key, full[:end], arm)
        if answer is None:
            killed = True
            replicas.fake.summary_delay_s = 0.0
            # The client retries elsewhere: while the dead replica's lease lasts, the others
            # wait for its summary, then fail open (no second summary of that prefix).
            retry = chat(replicas.next_url(), key, full[:end], "sixty")
            assert retry.headers["X-Context-Compaction"] == "failed"
            while compaction_leases(replicas):
                time.sleep(0.1)
            # After the lease, the same prefix is summarized again, once.
            answer = chat(replicas.next_url(), key, full[:end], "sixty")
            assert answer.headers["X-Context-Compaction"] == "auto"
        assert answer.http_response.status_code == 200
        if "X-Context-Divider-Id" in answer.headers:
            made.append(answer.headers["X-Context-Divider-Id"])
    assert killed and len(replicas.live) == 2
    stored = dividers(replicas.next_url(), key, "sixty")
    assert [d["id"] for d in stored] == made  # none lost, none duplicated
    assert len({d["covered_messages"] for d in stored}) == len(stored)
    # Every summary call made a divider, but the one whose replica died.
    assert len(replicas.fake.summary_requests()) == len(made) + 1


def test_a_usage_correction_recorded_by_one_replica_is_used_by_the_next(
        replicas: Replicas) -> None:
    key = replicas.create_key()
    full = agent.conversation(SPEC, 8)
    ends = turn_ends(full)
    a, b = replicas.url(0), replicas.url(1)
    chat(a, key, full[:ends[0]], "usage")  # the upstream counts as we do: ratio 1
    chat(b, key, full[:ends[1]], "usage")  # b has seen the conversation at ratio 1
    replicas.fake.usage_scale = 1.5  # from now on the upstream counts half again as much
    chat(a, key, full[:ends[2]], "usage")  # a records the new ratio
    answer = chat(b, key, full[:ends[3]], "usage")
    billed = answer.parse().usage.prompt_tokens
    shown = int(answer.headers["X-Context-Tokens-Before"])  # our estimate, corrected
    assert abs(shown - billed) / billed < 0.05, (shown, billed)


def cli(args: list[str], database_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=60, check=True,
                          env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                               "CONTEXT_PROXY_DATABASE_URL": database_url})


def until(check: Any, within_s: float = WITHIN_S) -> bool:
    """Whether ``check()`` comes true within ``within_s`` (polled)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


def test_revocations_and_policy_writes_reach_the_other_replicas(replicas: Replicas) -> None:
    a, b = replicas.url(0), replicas.url(1)
    key = replicas.create_key("acme")
    msg = [{"role": "user", "content": "hello"}]

    def status(url: str) -> int:
        r = httpx.post(f"{url}/chat/completions", json={"model": MODEL, "messages": msg},
                       headers={"Authorization": f"Bearer {key}"})
        return r.status_code

    def window(url: str) -> str:
        r = httpx.post(f"{url}/chat/completions", json={"model": MODEL, "messages": msg},
                       headers={"Authorization": f"Bearer {key}"})
        return r.headers["X-Context-Window"]

    assert status(a) == status(b) == 200 and window(b) == "16000"
    patched = httpx.patch(f"{a.removesuffix('/v1')}/admin/orgs/acme/policy",
                          json={"models": {MODEL: 12000}},
                          headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert patched.status_code == 200, patched.text
    c = replicas.url(2)
    assert until(lambda: window(b) == window(c) == "12000")

    assert replicas.store is not None
    key_id = next(k.id for k in replicas.store.keys.all() if k.org == "acme")
    cli(["keys", "revoke", key_id], replicas.database_url)
    assert until(lambda: status(b) == status(c) == 401) and status(a) == 401


def test_an_organization_switched_from_shadow_to_managed_is_managed_on_every_replica(
        replicas: Replicas) -> None:
    """Shadow mode is a policy field: a PATCH through one replica's admin API reaches every
    replica within 2 s, with no restart (the client's exact bytes go upstream until then)."""
    key = replicas.create_key("acme")
    msg = [{"role": "user", "content": "hello"}]

    def mode(url: str) -> str:
        r = httpx.post(f"{url}/chat/completions", json={"model": MODEL, "messages": msg},
                       headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        return r.headers.get("X-Context-Mode", "managed")

    def patch(value: str) -> None:
        patched = httpx.patch(f"{replicas.url(0).removesuffix('/v1')}/admin/orgs/acme/policy",
                              json={"mode": value},
                              headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert patched.status_code == 200, patched.text

    urls = [replicas.url(i) for i in range(3)]
    assert [mode(u) for u in urls] == ["managed"] * 3
    patch("shadow")
    assert until(lambda: [mode(u) for u in urls] == ["shadow"] * 3)
    patch("managed")
    assert until(lambda: [mode(u) for u in urls] == ["managed"] * 3)


def test_the_spill_purge_runs_on_one_replica(replicas: Replicas) -> None:
    # A replica prints its start-up line before its first purge tick has run: wait for the
    # one replica whose tick took the job (a guard against a hang, not a timing check).
    def purged() -> list[int]:
        return [i for i in range(3) if "spill purge:" in replicas.log(i)]

    assert until(purged, within_s=30)
    assert len(purged()) == 1
    assert replicas.store is not None
    # The lease of the hour is held, so the replicas' next ticks within it skip the job too.
    assert leases.held(replicas.store, "job spill-purge")
    assert not replicas.store.atomic(leases.claim, "job spill-purge", 3600, "another-replica")
