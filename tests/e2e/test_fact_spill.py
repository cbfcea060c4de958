"""Where a planted fact is (``proxy.testing.spills``), through the proxy: in a spill the request
names, read with the conversation's own key, or lost; a stranger's key reads nothing."""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from typing import Any

import openai
import pytest

from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness
from proxy.testing.spills import SPILL_REF, fact_spill, spilled

FACT = "FACT-TEST-1"


def test_a_fact_only_in_a_masked_output_is_found_in_its_spill(
        make_harness: Callable[..., Harness], sdk: Callable[..., openai.OpenAI]) -> None:
    # Compaction off: masking alone must keep the list under compaction's trigger, so it
    # clears the large output of the first turn.
    h = make_harness(fake=FakeUpstream(models={"gpt-4o-w8k": 8_000}), platform=PlatformConfig(
        defaults=validate_layer({"compaction.enabled": False})))
    key = h.create_key("acme")
    client = sdk(h, key)
    msgs: list[dict[str, Any]] = agent.conversation(agent.DEMO, 3)
    # Turn 2's output (turn 1's is the pinned plan, turn 3's the newest group: never masked).
    first = [i for i, m in enumerate(msgs) if m["role"] == "tool"][1]
    msgs[first] = {**msgs[first], "content": f"{FACT}\n" + "filler words " * 2_500}
    client.chat.completions.with_raw_response.create(
        model="gpt-4o-w8k", messages=msgs,  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": "spills"})
    sent = h.fake.requests[-1].body.decode()
    if FACT in sent:
        pytest.fail("the output was not masked: the test needs a smaller window")
    sid = fact_spill(h.base_url, key, "spills", sent, FACT)
    assert sid and SPILL_REF.search(sent) and sid in sent
    assert [s for s, _ in spilled(h.base_url, key, "spills", sent)] == \
        list(dict.fromkeys(SPILL_REF.findall(sent)))
    assert fact_spill(h.base_url, key, "spills", sent, "NOT-THERE-9") is None
    with pytest.raises(urllib.error.HTTPError):
        fact_spill(h.base_url, h.create_key("globex"), "spills", sent, FACT)
