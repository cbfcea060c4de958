"""One conversation hit at once by requests of different lengths, each compacting its own
prefix: every answer is a 200, one divider per prefix, no 'failed' caused by the race."""

from __future__ import annotations

import asyncio
from typing import Any

import openai

from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream

MODEL = "gpt-4o-w16k"
SPEC = agent.AgentSpec(seed=4, output_tokens=(600, 900), thought_words=(5, 10))
# Masking off and a large summary window: each request's own compaction is one summary call.
LAYER = validate_layer({"masking.enabled": False, "compaction.summary_model": "summarizer",
                        "models": {"summarizer": 1_000_000}})


def test_requests_of_different_lengths_compacting_at_once(make_harness: Any) -> None:
    fake = FakeUpstream(models={MODEL: 16_000}, summary_delay_s=0.2)
    h = make_harness(fake=fake, platform=PlatformConfig(defaults=LAYER))
    key = h.create_key()
    full = agent.conversation(SPEC, 30)
    ends = [i for i, m in enumerate(full) if m["role"] == "assistant"][-3:]  # three lengths

    async def round_(conversation: str) -> list[Any]:
        async with openai.AsyncOpenAI(base_url=h.base_url, api_key=key, max_retries=0) as c:
            return list(await asyncio.gather(*(
                c.chat.completions.with_raw_response.create(
                    model=MODEL, messages=full[:end], tools=agent.TOOLS,
                    extra_headers={"X-Conversation-Id": conversation}) for end in ends)))

    made = 0
    for n in range(5):
        answers = asyncio.run(round_(f"race-{n}"))
        outcomes = [a.headers["X-Context-Compaction"] for a in answers]
        assert all(a.http_response.status_code == 200 for a in answers)
        assert set(outcomes) <= {"auto", "reused"} and "auto" in outcomes, outcomes
        with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as c:
            dividers = c.get(f"/conversations/race-{n}/dividers", cast_to=object)
        data = dividers["data"]  # type: ignore[index]
        # One divider per prefix: as many as summaries made, each of its own prefix.
        assert len(data) == outcomes.count("auto") == len(fake.summary_requests()) - made
        assert len({d["covered_messages"] for d in data}) == len(data)
        made = len(fake.summary_requests())
