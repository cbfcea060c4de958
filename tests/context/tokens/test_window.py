"""Window discovery: policy table, upstream /v1/models (cached), litellm, unknown."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from typing import Any

import pytest

from proxy.context.stages.scope import Scope
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.window import WindowResolver, parse_models
from proxy.policy.model import Policy

POLICY = Policy(models={"my-llama": 32_768})


class Upstream:
    """A fake ``/v1/models`` endpoint that counts how often it is asked."""

    def __init__(self, payload: Any = None, fail: bool = False) -> None:
        self.payload = payload if payload is not None else {"data": [
            {"id": "vllm-model", "max_model_len": 65_536},
            {"id": "router-model", "context_length": 131_072},
            {"id": "other-model", "context_window": 1_000_000},
            {"id": "meta-model", "meta": {"context_length": 8_192}},
            {"id": "my-llama", "context_length": 4_096},
            {"id": "gpt-4o", "object": "model"},
        ]}
        self.fail = fail
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        await asyncio.sleep(0)
        if self.fail:
            raise ConnectionError("upstream down")
        return self.payload


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_litellm(known: dict[str, int]) -> Any:
    asked: list[str] = []

    def lookup(model: str) -> int | None:
        asked.append(model)
        return known.get(model)

    lookup.asked = asked  # type: ignore[attr-defined]
    return lookup


@pytest.mark.parametrize(
    ("model", "window", "source"),
    [
        ("my-llama", 32_768, "policy"),  # the policy table beats the upstream's 4,096
        ("openai/my-llama", 32_768, "policy"),
        ("vllm-model", 65_536, "upstream"),
        ("router-model", 131_072, "upstream"),
        ("other-model", 1_000_000, "upstream"),
        ("meta-model", 8_192, "upstream"),
        ("hosted_vllm/vllm-model", 65_536, "upstream"),
        ("gpt-4o", 128_000, "litellm"),  # the upstream lists it without a window
        ("mystery", None, "unknown"),
    ],
)
async def test_discovery_order(model: str, window: int | None, source: str) -> None:
    resolver = WindowResolver(Upstream(), litellm_lookup=fake_litellm({"gpt-4o": 128_000}))
    assert await resolver.resolve(model, POLICY) == (window, source)


async def test_upstream_list_is_cached_with_ttl() -> None:
    upstream, clock = Upstream(), Clock()
    resolver = WindowResolver(upstream, ttl_s=60, clock=clock, litellm_lookup=None)
    await asyncio.gather(*(resolver.window("vllm-model", POLICY) for _ in range(20)))
    assert upstream.calls == 1
    clock.now += 59
    await resolver.window("router-model", POLICY)
    assert upstream.calls == 1
    clock.now += 2
    await resolver.window("router-model", POLICY)
    assert upstream.calls == 2


async def test_upstream_failure_falls_through_and_is_not_retried_at_once() -> None:
    upstream, clock = Upstream(fail=True), Clock()
    lookup = fake_litellm({"vllm-model": 4_000})
    resolver = WindowResolver(upstream, error_ttl_s=30, clock=clock, litellm_lookup=lookup)
    assert await resolver.resolve("vllm-model", POLICY) == (4_000, "litellm")
    await resolver.window("vllm-model", POLICY)
    assert upstream.calls == 1
    upstream.fail = False
    clock.now += 31
    assert await resolver.resolve("vllm-model", POLICY) == (65_536, "upstream")


async def test_litellm_answers_are_cached() -> None:
    lookup = fake_litellm({"gpt-4o": 128_000})
    resolver = WindowResolver(None, litellm_lookup=lookup)
    for _ in range(3):
        assert await resolver.window("gpt-4o", Policy()) == 128_000
        assert await resolver.window("nope", Policy()) is None
    assert lookup.asked == ["gpt-4o", "nope"]


def test_parse_models_ignores_junk() -> None:
    payload = {"data": [{"id": "a", "context_length": "2048"}, {"id": "b", "context_length": -1},
                        {"id": "c", "max_model_len": True}, {"no": "id"}, "junk"]}
    assert parse_models(payload) == {"a": 2048}
    assert parse_models(None) == {}


def test_litellm_window_reads_the_bundled_map_without_importing_litellm() -> None:
    code = ("import sys; from proxy.context.tokens.window import litellm_window as w; "
            "print(w('gpt-4o'), w('openai/gpt-4o'), w('surely-not-a-model-xyz'), "
            "'litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={k: v for k, v in os.environ.items()
                                          if k != "LITELLM_LOCAL_MODEL_COST_MAP"})
    assert out.stdout.split() == ["128000", "128000", "None", "False"]


def test_compaction_window_falls_back() -> None:
    counter = TokenCounter()
    assert Scope(Policy(), None, counter, "m").compaction_window == 200_000
    assert Scope(Policy(fallback_window=50_000), None, counter, "m").compaction_window == 50_000
    assert Scope(Policy(), 32_768, counter, "m").compaction_window == 32_768


async def test_a_learned_limit_caps_every_source_and_is_logged_when_it_changes(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.context.tokens.window")
    resolver = WindowResolver(Upstream(), litellm_lookup=None)
    assert await resolver.resolve("my-llama", POLICY) == (32_768, "policy")
    resolver.learn("my-llama", 16_000)
    assert await resolver.resolve("my-llama", POLICY) == (16_000, "learned")
    resolver.learn("my-llama", 16_000)  # the same refusal again: nothing new to say
    resolver.learn("my-llama", 20_000)  # a higher figure never loosens the cap
    assert await resolver.resolve("my-llama", POLICY) == (16_000, "learned")
    resolver.learn("my-llama", 12_000)
    assert await resolver.resolve("my-llama", POLICY) == (12_000, "learned")
    resolver.learn("vllm-model", 100_000)  # above what the upstream says: it stays upstream's
    assert await resolver.resolve("vllm-model", POLICY) == (65_536, "upstream")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all(r.levelno == logging.WARNING for r in caplog.records)
    assert "'my-llama'" in lines[0] and "16000 tokens" in lines[0]
    assert "12000 tokens" in lines[1] and "'vllm-model'" in lines[2]
