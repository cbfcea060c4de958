"""Summary calls name the caller's organization to the upstream (``X-Context-Proxy-Org``) only
when the platform opts in (``upstream.send_org_header``); main calls never do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import openai
import pytest
from factories import synchronous_policies

from proxy.testing import agent
from proxy.testing.agent import DEMO, TOOLS
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness

MODEL = "agent-32k"
NO_MASKING = "defaults:\n  masking: {enabled: false}\n"



@pytest.mark.parametrize("send", [True, False])
def test_summary_calls_name_the_organization_only_when_the_platform_opts_in(
        make_harness: Callable[..., Harness], tmp_path: Path,
        sdk: Callable[[Harness, str], openai.OpenAI], send: bool) -> None:
    env = synchronous_policies(
        tmp_path / "policies", f"upstream: {{send_org_header: {str(send).lower()}}}\n" + NO_MASKING)
    h = make_harness(fake=FakeUpstream(models={MODEL: 32_768}, enforce_windows=True), env=env)
    client = sdk(h, h.create_key("acme"))
    messages = agent.conversation(replace(DEMO, seed=5, output_tokens=(1800, 2200)), 14)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS)
    assert raw.headers["X-Context-Compaction"] == "auto"
    chats = [r for r in h.fake.requests if r.path == "/v1/chat/completions"]
    summaries = [r for r in chats if is_summary_request(r.json)]
    main = [r for r in chats if not is_summary_request(r.json)]
    assert summaries and main
    assert all(r.headers.get("X-Context-Proxy-Org") == ("acme" if send else None)
               for r in summaries)
    assert all("X-Context-Proxy-Org" not in r.headers for r in main)
    assert "X-Context-Proxy-Org" not in raw.headers
