"""What the proxy tells clients about asking again, and about hints it ignores."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from proxy.testing.harness import Harness

MSG = [{"role": "user", "content": "hi"}]


def test_the_sdk_does_not_retry_a_refusal_that_cannot_change(make_harness: Any) -> None:
    h = make_harness(manual_compaction=True)
    key = h.create_key()
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=2) as c:
        before = len(h.fake.requests)
        with pytest.raises(openai.ConflictError) as err:  # below the floor: no assistant turn
            c.chat.completions.create(model="gpt-4o", messages=MSG,
                                      extra_headers={"X-Context-Compact": "now"})
        assert err.value.response.headers["x-should-retry"] == "false"
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="gpt-4o", messages=[{"role": "robot"}])
    assert len(h.fake.requests) == before  # nothing reached the upstream, nothing retried


def test_a_compaction_hint_on_a_deployment_without_it_is_ignored_and_said(
        harness: Harness, client: Any) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=MSG, extra_headers={"X-Context-Compact": "now"})
    assert raw.http_response.status_code == 200
    assert raw.headers["X-Context-Compact-Ignored"].startswith("manual compaction is disabled")
    assert raw.headers["X-Context-Compaction"] == "none"
    plain = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSG)
    assert "X-Context-Compact-Ignored" not in plain.headers


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_other_methods_on_the_chat_path_are_405(harness: Harness, key: str,
                                                method: str) -> None:
    req = urllib.request.Request(f"{harness.base_url}/chat/completions", method=method,
                                 headers={"Authorization": f"Bearer {key}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)
    with err.value:
        assert err.value.code == 405 and err.value.headers["Allow"] == "POST"
    assert not any(r.path == "/v1/chat/completions" for r in harness.fake.requests)


@pytest.mark.own_store
def test_demo_refuses_zero_turns_in_one_line() -> None:
    out = subprocess.run([sys.executable, "-m", "proxy.cli", "demo", "--turns", "0"],
                         capture_output=True, text=True, timeout=60,
                         env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": ""})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--turns: expected a whole number of at least 1" in out.stderr


def test_the_proxys_own_upstream_errors_carry_the_context_headers(make_harness: Any) -> None:
    from proxy.testing.fake_upstream import FakeUpstream, Fault

    h = make_harness(fake=FakeUpstream(faults=[Fault(drop=True)]))
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key(), max_retries=0) as c, \
            pytest.raises(openai.APIStatusError) as err:
        c.chat.completions.create(model="gpt-4o", messages=MSG)
    assert err.value.status_code == 502
    headers = err.value.response.headers
    assert headers["X-Context-Compaction"] == "none" and "X-Context-Tokens-Before" in headers
    assert headers["X-Conversation-Id"].startswith("fp-")


def test_keys_list_is_one_json_document(harness: Harness) -> None:
    import json
    import os

    assert harness.settings is not None
    env = {**os.environ, "CONTEXT_PROXY_DB": str(harness.settings.db_path)}
    out = subprocess.run([sys.executable, "-m", "proxy.cli", "keys", "list"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout)["object"] == "list"


def test_summarize_now_works_on_a_conversation_not_seen_yet(make_harness: Any) -> None:
    import json

    from proxy.testing import agent

    h = make_harness(manual_compaction=True)
    messages = agent.conversation(agent.AgentSpec(seed=2, output_tokens=(3000, 4000)), 6)
    req = urllib.request.Request(
        f"{h.base_url}/conversations/brand-new/compact", method="POST",
        data=json.dumps({"model": "gpt-4o", "messages": messages}).encode(),
        headers={"Authorization": f"Bearer {h.create_key()}",
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        body = json.loads(resp.read())
    assert body["divider"]["kind"] == "manual" and body["conversation_id"] == "brand-new"
