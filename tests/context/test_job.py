"""The values along the managed path (``proxy.context.job``): a request goes out as the
client's exact bytes when nothing changed, else with its new messages (in its own API's shape
when read through an adapter); a job reports figures corrected by its ratio, and forced it
compacts regardless of the trigger against the window it is given."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from proxy.auth import Principal
from proxy.context.adapters import anthropic
from proxy.context.job import ChatRequest
from proxy.context.report import ContextReport
from proxy.http.parse import check_chat
from proxy.state import STATE

RAW = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": 1}'
NEW = [{"role": "user", "content": "[summary]"}, {"role": "user", "content": "hi"}]


def report(messages: list[dict[str, str]] | None) -> ContextReport:
    return ContextReport("t", messages, 10, 5, 5, 1000, 0, "auto" if messages else "none")


def test_unchanged_requests_go_as_the_clients_bytes() -> None:
    chat = check_chat(RAW, orjson.loads(RAW))
    assert chat.outgoing(report(None)) is RAW
    sent = orjson.loads(chat.outgoing(report(NEW)))
    assert sent == {"model": "m", "messages": NEW, "x": 1}


def test_adapted_requests_go_out_in_their_own_api() -> None:
    body = {"model": "claude-x", "max_tokens": 9, "system": "S",
            "messages": [{"role": "user", "content": "hi"}]}
    adapted = anthropic.read(body)
    chat = ChatRequest(json.dumps(body).encode(), body, adapted.messages, "claude-x", None,
                       False, adapted=adapted)
    sent = orjson.loads(chat.outgoing(report([*adapted.messages[:-1],
                                              {"role": "user", "content": "again"}])))
    assert sent["system"] == "S" and sent["max_tokens"] == 9
    assert sent["messages"] == [{"role": "user", "content": "again"}]


async def test_a_job_reports_corrected_figures_and_can_be_forced(
        make_app: Callable[..., Awaitable[web.Application]]) -> None:
    app = await make_app()
    chat = check_chat(RAW, orjson.loads(RAW))
    job = await app[STATE].context.prepare(Principal("acme", None, "k", None), chat, "t-1")
    assert (job.conversation_id, job.force, job.kind) == ("t-1", False, "auto")
    assert job.reported(100) == round(100 * job.ratio)
    forced = job.forced(4096, "learned")
    assert forced.force and forced.scope.window == 4096 and forced.window_source == "learned"
    assert job.scope.window != 4096  # the job itself unchanged
