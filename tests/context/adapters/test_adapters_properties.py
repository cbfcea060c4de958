"""Properties of the Messages and Responses adapters under the stages, over random histories with
roles, block types and item types the proxy does not know:

- what the stages do not rewrite reaches the upstream byte-identical, in its original order, and
  nothing the proxy does not understand is ever dropped (masked or summarized away);
- after a compaction the newest tool group is there verbatim, and a Responses item is never
  sent without the reasoning item of its turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.context.adapters import Adapted, anthropic
from proxy.context.adapters import openai_responses as responses
from proxy.context.stages.compact import apply_summary
from proxy.context.stages.plan import plan
from proxy.context.stages.scope import Scope
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import CompactionPolicy, MaskingPolicy, Policy
from proxy.testing import agent

MODEL = "gpt-4o"
WINDOW = 6_000
COUNTER = TokenCounter()
SUMMARY = "SUMMARY-OF-EARLIER-TURNS"
POLICY = replace(Policy(), masking=replace(MaskingPolicy(), keep_recent=2, min_free_ratio=0.0),
                 compaction=replace(CompactionPolicy(), keep_ratio=0.05))
PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

sizes = st.integers(min_value=20, max_value=900)


def text(n: int, seed: int) -> str:
    return " ".join(f"w{seed}x{i % 97}" for i in range(n))


# --- histories -------------------------------------------------------------------------------


@st.composite
def anthropic_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A Claude Code-like history: tool loops, notes from the user, mid-conversation system
    messages (a beta), unknown roles and block types."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the invoice rounding."}]
    for t in range(draw(st.integers(min_value=2, max_value=14))):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": f"turn {t}", "signature": f"sig{t}"})
        if draw(st.booleans()):
            blocks.append({"type": "future_block", "payload": {"t": t}})
        calls = draw(st.integers(min_value=1, max_value=2))
        blocks += [{"type": "tool_use", "id": f"tu{t}_{c}", "name": "Read",
                    "input": {"file_path": f"f{t}_{c}.py"}} for c in range(calls)]
        msgs.append({"role": "assistant", "content": blocks})
        results: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": f"tu{t}_{c}",
             "content": text(draw(sizes), t * 10 + c)} for c in range(calls)]
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            results.append({"type": "text", "text": f"Note {t}: keep the API."})
        msgs.append({"role": "user", "content": results})
        kind = draw(st.integers(min_value=0, max_value=5))
        if kind == 0:
            msgs.append({"role": "system", "content": f"<env>turn {t}</env>"})
        elif kind == 1:
            msgs.append({"role": "observer", "content": [{"type": "text", "text": f"o{t}"}],
                         "extra": t})
    return {"model": MODEL, "max_tokens": 64, "system": "You are a coder.", "messages": msgs}


@st.composite
def responses_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A Codex-like input: reasoning items, calls (function and custom) answered in order or
    interleaved, assistant text, unknown items inside and outside turns."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the invoice rounding."}]
    for t in range(draw(st.integers(min_value=2, max_value=14))):
        reasoned = draw(st.booleans())
        turn: list[dict[str, Any]] = []
        if reasoned:
            turn.append({"type": "reasoning", "id": f"rs_{t}", "summary": [],
                         "encrypted_content": f"enc{t}"})
        if draw(st.booleans()):
            turn.append({"type": "message", "role": "assistant", "id": f"msg_{t}",
                         "content": [{"type": "output_text", "text": f"Reading {t}."}]})
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            turn.append({"type": "web_search_call", "id": f"ws_{t}", "status": "completed"})
        calls = draw(st.integers(min_value=1, max_value=2))
        interleave = draw(st.booleans())
        outputs = []
        for c in range(calls):
            custom = draw(st.booleans())
            call = {"type": "custom_tool_call", "call_id": f"c{t}_{c}", "name": "apply_patch",
                    "input": "*** Begin Patch"} if custom else {
                "type": "function_call", "call_id": f"c{t}_{c}", "name": "shell",
                "arguments": json.dumps({"cmd": f"cat f{t}_{c}.py"})}
            call["id"] = f"fc_{t}_{c}"
            out = {"type": "custom_tool_call_output" if custom else "function_call_output",
                   "call_id": f"c{t}_{c}", "output": text(draw(sizes), t * 10 + c)}
            turn.append(call)
            if interleave:
                turn.append(out)
            else:
                outputs.append(out)
        items += [*turn, *outputs]
        if draw(st.integers(min_value=0, max_value=4)) == 0:
            items.append({"type": "future_item", "data": t})
        if draw(st.integers(min_value=0, max_value=4)) == 0:
            items.append({"role": "user", "content": f"Note {t}."})
    return {"model": MODEL, "instructions": "You are a coder.", "input": items}


# --- the stages as the service runs them -----------------------------------------------------


def managed(adapted: Adapted) -> tuple[list[dict[str, Any]], bool]:
    """The body's messages after masking and, when it triggers, compaction with a fixed
    summary; and whether it compacted."""
    scope = Scope(POLICY, WINDOW, COUNTER, MODEL, adapted.tools)
    p = plan(adapted.messages, scope)
    if p.action != "summarize" or p.compaction is None:
        return p.mask.messages, False
    return apply_summary(p.mask.messages, p.compaction, SUMMARY, POLICY), True


def dumps(x: Any) -> str:
    return json.dumps(x, sort_keys=False)


def rewritten(x: Any) -> bool:
    """A summary or a placeholder: what the stages make."""
    return SUMMARY in dumps(x) or "[tool output cleared" in dumps(x)


def check_passthrough(sent: list[Any], original: list[Any], is_unknown: Callable[[Any], bool]
                      ) -> None:
    positions = {dumps(x): i for i, x in enumerate(original)}
    kept = [positions[dumps(x)] for x in sent if not rewritten(x)]
    for x in sent:
        assert rewritten(x) or dumps(x) in positions  # byte-identical to what the client sent
    assert kept == sorted(kept)  # in the original order
    for i, x in enumerate(original):
        if is_unknown(x):
            assert i in kept, x  # never masked or summarized away


# --- Messages --------------------------------------------------------------------------------


def unknown_message(m: Any) -> bool:
    return m.get("role") not in ("user", "assistant")


@PROPERTY
@given(anthropic_bodies())
def test_messages_pass_through_what_they_do_not_rewrite(body: dict[str, Any]) -> None:
    adapted = anthropic.read(body)
    out, _ = managed(adapted)
    sent = adapted.encode(out)
    anthropic.read(sent)  # still a valid tool sequence for the API
    # Blocks: every block of every message sent is one the client sent, or a placeholder.
    blocks = {dumps(b) for m in body["messages"] if isinstance(m["content"], list)
              for b in m["content"]}
    for m in sent["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else []:
            assert rewritten(b) or dumps(b) in blocks
    # Messages: whole ones as sent, in order (a message may also come back with some of its
    # blocks, those of a summarized tool group left out), the unknown ones all there.
    originals = {dumps(m) for m in body["messages"]}
    whole = [m for m in sent["messages"] if dumps(m) in originals]
    check_passthrough(whole, body["messages"], unknown_message)
    assert sent["system"] is body["system"]


@PROPERTY
@given(anthropic_bodies())
def test_messages_compaction_keeps_the_newest_tool_group(body: dict[str, Any]) -> None:
    adapted = anthropic.read(body)
    out, compacted = managed(adapted)
    sent = adapted.encode(out)["messages"]
    msgs = body["messages"]
    last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    group = [msgs[last], next(m for m in msgs[last + 1:] if m["role"] == "user")]
    for m in group:
        assert any(s is m for s in sent), (compacted, m)


# --- Responses -------------------------------------------------------------------------------


def unknown_item(item: Any) -> bool:
    """Items outside any turn the adapter cannot read as its own."""
    return item.get("type") == "future_item"


def turn_reasoning(items: list[Any]) -> dict[str, str]:
    """Each item id → the reasoning item id of its turn (as the API pairs them)."""
    owner: dict[str, str] = {}
    current: str | None = None
    for item in items:
        if item.get("type") == "reasoning":
            current = item["id"]
        elif item.get("role") == "user" or item.get("type") == "future_item":
            current = None
        elif current is not None and "id" in item:
            owner[item["id"]] = current
    return owner


@PROPERTY
@given(responses_bodies())
def test_responses_pass_through_what_they_do_not_rewrite(body: dict[str, Any]) -> None:
    adapted = responses.read(body)
    out, _ = managed(adapted)
    sent = adapted.encode(out)
    responses.read(sent)  # every call still has its output, every output its call
    check_passthrough(sent["input"], body["input"], unknown_item)
    assert sent["instructions"] is body["instructions"]


@PROPERTY
@given(responses_bodies())
def test_responses_reasoning_stays_with_its_turn(body: dict[str, Any]) -> None:
    adapted = responses.read(body)
    out, compacted = managed(adapted)
    sent = adapted.encode(out)["input"]
    owner = turn_reasoning(body["input"])
    ids = [x.get("id") for x in sent]
    for k, item in enumerate(sent):
        rs = owner.get(item.get("id", ""))
        if rs is not None:
            assert rs in ids[:k], (item["id"], rs)  # its reasoning item came before it
    # The newest call and its output are there as sent (its reasoning: checked above).
    items = body["input"]
    call = next(x for x in reversed(items) if x.get("type") in responses.CALLS)
    output = next(x for x in items if x.get("type") in responses.OUTPUTS
                  and x["call_id"] == call["call_id"])
    assert any(s is call for s in sent) and any(s is output for s in sent), compacted


# --- chat completions ------------------------------------------------------------------------


@PROPERTY
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=3, max_value=24),
       st.booleans())
def test_chat_compaction_keeps_the_newest_tool_group(seed: int, turns: int, note: bool) -> None:
    spec = agent.AgentSpec(seed=seed, output_tokens=(50, 700), thought_words=(5, 40))
    msgs = agent.conversation(spec, turns)
    if note:  # a note from the user after large results must not leave them behind
        msgs.append({"role": "user", "content": "Note: keep the public API."})
    scope = Scope(POLICY, WINDOW, COUNTER, MODEL, agent.TOOLS)
    p = plan(msgs, scope)
    out = p.mask.messages if p.action != "summarize" or p.compaction is None else \
        apply_summary(p.mask.messages, p.compaction, SUMMARY, POLICY)
    last = max(i for i, m in enumerate(msgs) if m.get("tool_calls"))
    group = [msgs[last], *(m for m in msgs[last + 1:] if m.get("role") == "tool")]
    for m in group:
        assert m in out
