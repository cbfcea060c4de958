"""Policies in the live path: two organizations, one conversation shape, different behaviour."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

from proxy.context.tokens import TokenCounter
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

MODEL = "policy-e2e"
WINDOW = 10_000
TOKEN = "admin-e2e-token"


def conversation() -> list[dict[str, Any]]:
    """About 55 % of the window: above a 0.5 trigger, below 0.8."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "Plan the migration. CODE-101"},
    ]
    for i in range(8):
        messages += [{"role": "assistant", "content": f"Step {i}: FACT-{i}." + " hello" * 620},
                     {"role": "user", "content": f"Continue with step {i + 1}."}]
    return messages


def test_two_orgs_with_different_triggers_behave_differently(
        make_harness: Callable[..., Harness], tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "platform.yaml").write_text(
        f"models: {{{MODEL}: {{context_window: {WINDOW}}}}}\n"
        "defaults: {masking: {enabled: false}}\n")
    h = make_harness(fake=FakeUpstream(models={MODEL: WINDOW}),
                     env={"CONTEXT_PROXY_POLICIES": str(folder),
                          "CONTEXT_PROXY_ADMIN_TOKEN": TOKEN})
    messages = conversation()
    share = TokenCounter().count_messages(messages, MODEL) / WINDOW
    assert 0.5 < share < 0.8, share
    admin = httpx.Client(base_url=h.base_url.removesuffix("/v1"),
                         headers={"Authorization": f"Bearer {TOKEN}"})
    for org, trigger in (("eager", 0.5), ("patient", 0.9)):
        resp = admin.patch(f"/admin/orgs/{org}/policy",
                           content=json.dumps({"compaction.trigger_ratio": trigger}))
        assert resp.status_code == 200, resp.text

    outcomes = {}
    for org in ("eager", "patient"):
        client = openai.OpenAI(base_url=h.base_url, api_key=h.create_key(org), max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages,  # type: ignore[arg-type]
            extra_headers={"X-Conversation-Id": "same-shape"})
        outcomes[org] = (raw.headers["X-Context-Compaction"],
                         int(raw.headers["X-Context-Tokens-Before"]),
                         int(raw.headers["X-Context-Tokens-After"]))
    assert outcomes["eager"][0] == "auto"
    assert outcomes["eager"][2] < outcomes["eager"][1]
    assert outcomes["patient"][0] == "none"
    assert outcomes["patient"][2] == outcomes["patient"][1]
    assert len(h.fake.summary_requests()) == 1

    # The same organization follows an admin change on its very next request.
    resp = admin.patch("/admin/orgs/patient/policy",
                       content=json.dumps({"compaction.trigger_ratio": 0.5}))
    assert resp.status_code == 200
    client = openai.OpenAI(base_url=h.base_url, api_key=h.create_key("patient"), max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages,  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": "same-shape"})
    assert raw.headers["X-Context-Compaction"] == "auto"
