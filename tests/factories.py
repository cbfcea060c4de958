"""Message factories and a deterministic fake summarizer, shared by the stage tests."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from proxy.context.offload import run_inline
from proxy.context.stages.compact import CompactionPlan, plan_compaction
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import format_summary
from proxy.context.summary.compaction import compact
from proxy.context.summary.summarizer import Summarizer
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import Policy, validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing.spills import fact_spill

Message = dict[str, Any]

_ids = itertools.count(1)
WORDS = (
    "the build failed because config value path error file module test import return self "
    "agent user model token window summary cache request response server client status retry "
    "install package version update commit branch merge review deploy log trace line column"
).split()


# A tool as the Messages API (``TOOL``) and the Responses API (``FUNCTION``) declare it, and a
# text long enough to pass a provider's 1,024-token cache floor.
LONG = "The build log says: " + "compiling module ok; " * 400
TOOL = {"name": "read_file", "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
FUNCTION = {"type": "function", "name": "read_file", "description": "Read a file",
            "parameters": TOOL["input_schema"]}


def words(n: int, seed: int = 0) -> str:
    """About ``n`` tokens of deterministic filler text (one common word per token)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def hellos(n: int) -> str:
    """Exactly ``n`` tokens in cl100k_base and o200k_base (`` hello`` is one token in both)."""
    return " hello" * n


def system(text: str = "You are a careful coding agent.") -> Message:
    return {"role": "system", "content": text}


def developer(text: str = "Prefer small diffs.") -> Message:
    return {"role": "developer", "content": text}


def user(text: str = "Please fix the failing test.", **extra: Any) -> Message:
    return {"role": "user", "content": text, **extra}


def tool_call(name: str, args: Any = None, call_id: str | None = None) -> dict[str, Any]:
    return {
        "id": call_id or f"call_{next(_ids)}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args or {})},
    }


def assistant(text: str | None = "Done.", *calls: dict[str, Any]) -> Message:
    msg: Message = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def tool_result(call: dict[str, Any] | str, content: Any = "ok", **extra: Any) -> Message:
    cid = call if isinstance(call, str) else call["id"]
    return {"role": "tool", "tool_call_id": cid, "content": content, **extra}


def tool_turn(name: str, output: str, args: Any = None) -> list[Message]:
    """An assistant message calling ``name`` once, and its result."""
    call = tool_call(name, args)
    return [assistant(None, call), tool_result(call, output)]


def parallel_turn(outputs: dict[str, str]) -> list[Message]:
    """One assistant message calling each tool in ``outputs`` at once, then every result."""
    calls = [tool_call(name) for name in outputs]
    return [assistant(None, *calls), *(tool_result(c, out) for c, out in
                                       zip(calls, outputs.values(), strict=True))]


def summary_message(text: str = "Earlier: the user wants X.", role: str = "user") -> Message:
    return {"role": role, "content": format_summary(text)}


def agent_session(turns: int, output_tokens: int, seed: int = 0) -> list[Message]:
    """A single-task agent session: one user message, then ``turns`` read_file turns."""
    msgs = [system(), user("Refactor the module and keep the tests green.")]
    for t in range(turns):
        msgs += tool_turn("read_file", words(output_tokens, seed + t), {"path": f"src/f{t}.py"})
    msgs.append(assistant("All done."))
    return msgs


def prompt_text(prompt: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content")) for m in prompt)


class FakeSummarizer:
    """Records every request; answers with a short summary derived from the request."""

    def __init__(self, reply: str | None = None) -> None:
        self.reply = reply
        self.calls: list[tuple[list[dict[str, Any]], int]] = []

    async def __call__(self, prompt: list[dict[str, Any]], max_tokens: int) -> str:
        self.calls.append((prompt, max_tokens))
        if self.reply is not None:
            return self.reply
        return f"Summary {len(self.calls)}: {len(prompt_text(prompt))} characters were read."

    @property
    def inputs(self) -> str:
        return "\n".join(prompt_text(p) for p, _ in self.calls)


@dataclass(frozen=True)
class Compaction:
    """What ``compact_list`` did. ``status``: ``none`` (not triggered), ``compacted`` or
    ``insufficient`` (nothing to summarize, no shrink, or still over the trigger)."""

    status: str
    messages: list[Message]
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    plan: CompactionPlan | None = None
    summary_calls: int = 0

    @property
    def rewritten(self) -> bool:
        return self.summary is not None


async def compact_list(
    messages: list[Message], originals: list[Message] | None, policy: Policy, window: int | None,
    counter: TokenCounter, model: str, summarize: Summarizer, summary_window: int | None = None,
    force: bool = False, *, plan: CompactionPlan | None = None, tools: list[Any] | None = None,
) -> Compaction:
    """Plan (unless ``plan`` is given) and run a compaction of ``messages`` the way the service
    does, inline: the pure plan, then ``proxy.context.summary.compaction.compact``."""
    scope = Scope(policy, window, counter, model, tools)
    plan = plan or plan_compaction(messages, scope, force=force)
    before = scope.count(messages)
    if plan is None:
        return Compaction("none", list(messages), before, before)
    unchanged = Compaction("insufficient", list(messages), before, before, plan=plan)
    if not plan.summarizable:
        return unchanged
    summary_scope = Scope(policy, summary_window or plan.window, counter, model)
    done = await compact(plan, messages, originals or messages, scope, summarize,
                         summary_scope, run_inline)
    if not done.gain:
        return replace(unchanged, summary_calls=done.calls)
    return Compaction(done.status, done.messages, before, done.tokens_after, done.summary, plan,
                      done.calls)


# The seed's masking steps (a step whenever it frees min_free_ratio of the window), for tests
# about what masking does rather than when it pays for itself (masking.priced).
SEED_STEPS = {"masking.priced": False}
SEED_STEPS_YAML = "masking: {priced: false}"


def seed_steps_platform() -> PlatformConfig:
    """Platform defaults with the seed's masking steps."""
    return PlatformConfig(defaults=validate_layer(dict(SEED_STEPS)))


def synchronous(platform_yaml: str = "") -> str:
    """``platform_yaml`` (a policies folder's ``platform.yaml``) with background preparation
    off (``compaction.prepare_ratio: 1.0``) unless it sets a ratio: the request that crosses
    the trigger compacts and waits for its summary, the path these tests are about."""
    data = yaml.safe_load(platform_yaml) or {}
    compaction = data.setdefault("defaults", {}).setdefault("compaction", {})
    compaction.setdefault("prepare_ratio", 1.0)
    return str(yaml.safe_dump(data))


def synchronous_policies(folder: Path, platform_yaml: str = "") -> dict[str, str]:
    """The environment of a proxy whose policies folder is ``folder`` with ``synchronous``'s
    platform file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "platform.yaml").write_text(synchronous(platform_yaml))
    return {"CONTEXT_PROXY_POLICIES": str(folder)}


def reachable(base_url: str, key: str, conversation: str, sent: str, fact: str) -> bool:
    """Whether ``fact`` is in the request text ``sent``, or in the original of a spill it names
    (``proxy.testing.spills.fact_spill``)."""
    return fact_spill(base_url, key, conversation, sent, fact) is not None
