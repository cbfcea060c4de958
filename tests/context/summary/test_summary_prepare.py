"""Background preparation (``proxy.context.summary.prepare``), in process with the application's own
services in front of the fake upstream: a request past ``prepare_ratio`` × window plans a
summary at the prepare point, its preparation stores one prepared summary that fits the
request, one preparation per conversation runs at a time, and a failed one is counted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from proxy.auth import Principal
from proxy.context.job import Job
from proxy.context.summary.prepare import at_prepare_point, covers, matches, preparing
from proxy.http.parse import check_chat
from proxy.policy.model import Policy, build_policy, validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.state import STATE
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.scrape import metric

App = Callable[..., Awaitable[web.Application]]
LAYER = validate_layer({"models": {"m-8k": 8192}, "compaction.prepare_ratio": 0.4,
                        "masking.enabled": False})
PREPARING = PlatformConfig(defaults=LAYER)


async def job_for(app: web.Application, turns: int) -> Job:
    messages = agent.conversation(agent.AgentSpec(output_tokens=(450, 550)), turns)
    body = {"model": "m-8k", "messages": messages, "tools": agent.TOOLS}
    chat = check_chat(orjson.dumps(body), body)
    return await app[STATE].context.prepare(Principal("acme", None, "key_1", "sk-up"), chat,
                                            "ticket-1")


def test_a_policy_prepares_only_under_its_trigger() -> None:
    assert preparing(build_policy(LAYER))
    assert not preparing(Policy())  # 1.0: off
    assert not preparing(build_policy(LAYER, validate_layer({"compaction.enabled": False})))


async def test_a_preparation_stores_a_summary_that_fits_the_request(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    app = await make_app(PREPARING)
    preparer = app[STATE].context.preparer
    job = await job_for(app, 6)
    plan = at_prepare_point(job)
    # Planned ahead with no keep window left (0.10 - the 0.40 of room to the trigger): the
    # summary covers the whole list; the request that applies it brings its newest turn.
    assert plan.action == "summarize" and plan.covered == len(job.request.messages)
    assert preparer.start(job, None) is True
    assert preparer.start(job, None) is False  # one per conversation at a time
    task = preparer.running(job.key)
    assert task is not None and preparer.busy
    await task
    assert not preparer.busy
    assert len(fake_upstream.summary_requests()) == 1
    assert await preparer.usable(job) is None  # nothing after it: not for the same list
    later = await job_for(app, 7)
    prep = await preparer.usable(later)
    assert prep is not None and covers(job, prep) and not matches(job, prep)
    assert matches(later, prep) and prep.covered == plan.covered


async def test_a_failed_preparation_is_counted_and_leaves_nothing(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    app = await make_app(PREPARING)
    state = app[STATE]
    fake_upstream.faults.append(Fault(status=500, times=-1))
    job = await job_for(app, 6)
    assert state.context.preparer.start(job, None)
    await state.context.preparer.running(job.key)  # type: ignore[misc]
    assert await state.context.preparer.usable(job) is None
    text = state.metrics.render().decode()
    assert metric(text, "context_proxy_summaries_prepared_total", outcome="failed") == 1
