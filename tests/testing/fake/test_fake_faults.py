"""Scripted misbehaviour of the fake upstream (``proxy.testing.fake.faults``): which answer a fault
makes, in process (the fake serving them over a socket: ``tests/upstream/test_faults.py``)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from proxy.testing.fake.faults import DEFAULT_ERROR, PAGES, Fault, answer_json, misbehave


def request() -> web.Request:
    return make_mocked_request("POST", "/v1/chat/completions")


@pytest.mark.parametrize("mode", sorted(PAGES))
async def test_a_page_of_its_kind_with_the_faults_status(mode: str) -> None:
    answer = await misbehave(request(), Fault(status=502, mode=mode, headers={"X-A": "1"}))
    assert isinstance(answer, web.Response) and answer.status == 502
    assert answer.content_type == PAGES[mode][0] and answer.text == PAGES[mode][1]
    assert answer.headers["X-A"] == "1"


async def test_an_error_body_or_the_default_one() -> None:
    plain = await misbehave(request(), Fault(status=429, headers={"Retry-After": "2"}))
    assert isinstance(plain, web.Response) and plain.status == 429
    assert json.loads(plain.text or "") == DEFAULT_ERROR and plain.headers["Retry-After"] == "2"
    own = await misbehave(request(), Fault(status=400, body={"error": {"message": "mine"}}))
    assert isinstance(own, web.Response) and json.loads(own.text or "")["error"]["message"] == \
        "mine"


async def test_a_200_without_a_body_lets_the_normal_answer_out_after_its_delay() -> None:
    began = time.monotonic()
    assert await misbehave(request(), Fault(status=200, delay_s=0.05)) is None
    assert time.monotonic() - began >= 0.05
    plain = await answer_json(request(), {"ok": True}, None)
    assert isinstance(plain, web.Response) and json.loads(plain.text or "") == {"ok": True}


def test_a_fault_applies_once_to_the_chat_route_by_default() -> None:
    fault = Fault()
    assert (fault.status, fault.times, fault.path, fault.mode, fault.drop) == (
        500, 1, "/v1/chat/completions", "", False)
    assert asyncio.iscoroutinefunction(misbehave)
