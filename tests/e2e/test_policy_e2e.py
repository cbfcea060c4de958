"""Policies in the live path: two organizations, one conversation shape, different behaviour."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cli import main
from proxy.context.tokens.counter import TokenCounter
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
        make_harness: Callable[..., Harness], tmp_path: Path, sdk) -> None:
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

    def set_trigger(org: str, trigger: float) -> None:
        resp = httpx.patch(f"{h.base_url.removesuffix('/v1')}/admin/orgs/{org}/policy",
                           content=json.dumps({"compaction.trigger_ratio": trigger}),
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status_code == 200, resp.text

    for org, trigger in (("eager", 0.5), ("patient", 0.9)):
        set_trigger(org, trigger)

    outcomes = {}
    for org in ("eager", "patient"):
        client = sdk(h, h.create_key(org))
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
    set_trigger("patient", 0.5)
    client = sdk(h, h.create_key("patient"))
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages,  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": "same-shape"})
    assert raw.headers["X-Context-Compaction"] == "auto"


def test_a_cli_write_reaches_the_running_server(make_harness: Callable[..., Harness],
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "policies").mkdir(exist_ok=True)
    h = make_harness(env={"CONTEXT_PROXY_POLICIES": str(tmp_path / "policies")})
    assert h.state.policies.resolve("acme").compaction.trigger_ratio == 0.8
    monkeypatch.setenv("CONTEXT_PROXY_DB", str(tmp_path / "proxy.db"))  # the harness's store
    monkeypatch.setenv("CONTEXT_PROXY_POLICIES", str(tmp_path / "policies"))
    assert main(["policy", "set", "--org", "acme", "compaction.trigger_ratio=0.65"]) == 0
    deadline = time.monotonic() + 1.5
    while h.state.policies.resolve("acme").compaction.trigger_ratio != 0.65:
        assert time.monotonic() < deadline, "the CLI write did not reach the server"
        time.sleep(0.02)
