"""Property tests: both stages over generated agent conversations.

The generator mixes roles, parallel tool calls, pinned plan calls, protected blocks (by marker
and by name), huge single outputs, earlier summaries and single-task sessions (one user message,
many tool turns), under varied policies and windows.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, replace
from typing import Any

from factories import (
    FakeSummarizer,
    assistant,
    compact_list,
    developer,
    summary_message,
    system,
    tool_call,
    tool_result,
    user,
    words,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy.context.stages.compact import apply_summary
from proxy.context.stages.mask import is_placeholder, mask_tool_outputs
from proxy.context.stages.ordering import ordering_problems
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import (
    called_tools,
    is_protected,
    is_result,
    is_summary,
    message_text,
    result_tool_name,
    summary_body,
    tool_names_by_call_id,
)
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import CompactionPolicy, MaskingPolicy, Policy, ProtectedRule

MODEL = "gpt-4o"
COUNTER = TokenCounter()  # shared, as in the server: the cache must not leak between examples
SIZES = (3, 30, 120, 500, 1_500)
TOOLS = ("read_file", "grep", "bash", "search", "recall")
RULES = (ProtectedRule(marker="<memory>"), ProtectedRule(marker="<recent_notes>"),
         ProtectedRule(name="memory_doc"), ProtectedRule(name="recall"))
KINDS = ("user", "text", "tool", "tool", "tool", "parallel", "parallel", "pinned", "protected",
         "named", "huge", "summary", "developer")
SETTINGS = settings(max_examples=800, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
Msgs = list[dict[str, Any]]


@dataclass
class Case:
    messages: Msgs
    policy: Policy
    window: int | None
    force: bool


def _calls(rng: random.Random, names: list[str], size: int) -> Msgs:
    calls = [tool_call(n, {"arg": rng.randrange(1000)}) for n in names]
    out: Msgs = [assistant(rng.choice([None, "Working on it."]), *calls)]
    for c in calls:
        text = words(size, rng.randrange(10**6))
        if rng.random() < 0.05:
            text = "<recent_notes>" + text
        out.append(tool_result(c, text))
    rng.shuffle(out[1:])  # results may come back in any order
    return out


def _step(kind: str, size: int, rng: random.Random, single_task: bool) -> Msgs:
    text = words(size, rng.randrange(10**6))
    if kind == "user" and not single_task:
        return [user(text)]
    if kind == "tool":
        return _calls(rng, [rng.choice(TOOLS)], size)
    if kind == "parallel":
        return _calls(rng, rng.sample((*TOOLS, "write_todos"), rng.randint(2, 4)), size)
    if kind == "pinned":
        return _calls(rng, ["write_todos"], size)
    if kind == "huge":
        return _calls(rng, ["read_file"], rng.randint(3_000, 8_000))
    if kind == "protected":
        marker = rng.choice(["<memory>", "<recent_notes>"])
        return [user(f"{marker}{text}")] if not single_task else \
            [*_calls(rng, ["read_notes"], 0)[:1], tool_result("x", f"{marker}{text}")]
    if kind == "named" and not single_task:
        return [user(text, name="memory_doc")]
    if kind == "summary" and not single_task:
        return [summary_message(text, rng.choice(["user", "assistant", "system"]))]
    if kind == "developer":
        return [developer(text)]
    return [assistant(text)]


def _fix_protected_ids(msgs: Msgs) -> Msgs:
    """Give the results built by the single-task ``protected`` step their real call ids."""
    for i, m in enumerate(msgs):
        if m.get("tool_call_id") == "x":
            m["tool_call_id"] = msgs[i - 1]["tool_calls"][0]["id"]
    return msgs


@st.composite
def cases(draw: st.DrawFn, single_task: bool | None = None) -> Case:
    seed = draw(st.integers(0, 2**31))
    rng = random.Random(seed)
    single = draw(st.booleans()) if single_task is None else single_task
    steps = draw(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, len(SIZES) - 1)),
                          min_size=1, max_size=80 if single else 50))
    msgs: Msgs = [system(words(rng.choice(SIZES), seed))]
    if draw(st.booleans()):
        msgs.append(developer())
    if draw(st.integers(0, 4)) == 0:
        msgs.append(summary_message(words(60, seed), draw(st.sampled_from(["user", "system"]))))
    if draw(st.integers(0, 3)) == 0:
        msgs.append(user("<memory>the user prefers tabs</memory>"))
    msgs.append(user("The task: " + words(rng.choice(SIZES[:3]), seed + 1)))
    for kind, size in steps:
        msgs += _step(kind, SIZES[size], rng, single)
    _fix_protected_ids(msgs)
    total = COUNTER.count_messages(msgs, MODEL)
    window = None if draw(st.integers(0, 5)) == 0 else max(300, int(
        total / draw(st.floats(0.3, 2.5))))
    comp = replace(
        CompactionPolicy(), protected=RULES,
        keep_ratio=draw(st.sampled_from([0.05, 0.1, 0.2, 0.3])),
        summary_role=draw(st.sampled_from(["user", "assistant", "system", "developer"])),
        protect_first_user=draw(st.integers(0, 5)) > 0)
    mask = replace(MaskingPolicy(), keep_recent=draw(st.integers(0, 7)),
                   exclude_tools=draw(st.sampled_from([(), ("search",)])))
    if window is None:
        # Unknown windows fall back to 200,000: scale the fallback so compaction still triggers.
        policy = Policy(masking=mask, compaction=comp, fallback_window=max(300, total // 2))
    else:
        policy = Policy(masking=mask, compaction=comp)
    return Case(msgs, policy, window, force=draw(st.integers(0, 5)) == 0)


def _dumps(msgs: Msgs) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in msgs]


def _required(msgs: Msgs, policy: Policy) -> list[int]:
    """Indices SPEC section 5 says must survive compaction byte for byte."""
    cp = policy.compaction
    names = tool_names_by_call_id(msgs)
    must: set[int] = set()
    users = [i for i, m in enumerate(msgs) if m["role"] == "user" and not is_summary(m)]
    if users:
        must.add(users[-1])
        if cp.protect_first_user:
            must.add(users[0])
    for i, m in enumerate(msgs):
        if is_summary(m):
            continue
        tool = result_tool_name(m, names) if is_result(m) else None
        if m["role"] in ("system", "developer") or is_protected(m, cp.protected, tool):
            must.add(i)
    for pinned in cp.pinned_tools:
        newest = max((i for i, m in enumerate(msgs) if pinned in called_tools(m)), default=None)
        if newest is not None:
            ids = {c["id"] for c in msgs[newest]["tool_calls"] if c["function"]["name"] == pinned}
            must.add(newest)
            must.update(i for i, m in enumerate(msgs) if m.get("tool_call_id") in ids)
    return sorted(must)


def _check_mask(case: Case) -> Any:
    msgs, policy = case.messages, case.policy
    res = mask_tool_outputs(msgs, Scope(policy, case.window, COUNTER, MODEL))
    event(f"masking: {'ran' if res.triggered else 'idle'}, {'some' if res.masked else 'none'}")
    assert ordering_problems(res.messages) == []
    assert len(res.messages) == len(msgs) and res.tokens_after <= res.tokens_before
    results = [i for i, m in enumerate(msgs) if is_result(m)]
    newest = results[len(results) - policy.masking.keep_recent:] if policy.masking.keep_recent \
        else []
    # Called without a compaction point, masking stands alone (compaction will not do the
    # work): where the list would pass compaction's trigger, the newest results yield too,
    # never those of the newest tool group (the results after the last assistant message).
    last = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=-1)
    for i, (a, b) in enumerate(zip(msgs, res.messages, strict=True)):
        if a != b:
            assert is_result(a) and is_placeholder(b["content"])
            assert i not in newest or i < last
            assert {k: v for k, v in a.items() if k != "content"} == \
                {k: v for k, v in b.items() if k != "content"}
    for i in _required(msgs, policy):
        assert res.messages[i] == msgs[i]
    again = mask_tool_outputs(json.loads(json.dumps(msgs)),
                              Scope(policy, case.window, TokenCounter(), MODEL))
    assert _dumps(again.messages) == _dumps(res.messages)
    return res


def _check_compaction(case: Case, masked: Msgs, res: Any, fake: FakeSummarizer) -> None:
    msgs, out, plan = case.messages, res.messages, res.plan
    event(f"compaction: {res.status}{' (rewritten)' if res.rewritten else ''}")
    assert ordering_problems(out) == []
    before = COUNTER.count_messages(msgs, MODEL)
    assert COUNTER.count_messages(out, MODEL) <= COUNTER.count_messages(masked, MODEL) <= before
    out_dumps = _dumps(out)
    positions = [out_dumps.index(json.dumps(msgs[i], sort_keys=True))
                 for i in _required(msgs, case.policy)]
    assert positions == sorted(positions)  # all present, in their original order
    if not res.rewritten:
        assert out == masked
        return
    tail = masked[plan.cut:]
    assert out[len(out) - len(tail):] == tail  # the keep window is verbatim
    assert out[: len(plan.preserved)] == [masked[i] for i in plan.preserved]
    assert is_summary(out[len(plan.preserved)])
    assert sum(COUNTER.message_token_list(masked[plan.keep_start:], MODEL)) <= plan.keep_budget
    summary = message_text(out[len(plan.preserved)])
    for i in plan.summarize:  # the summarizer read the original text of each message, or
        # (a masked output over the reading budget) the summary lists its placeholder
        text = summary_body(msgs[i]) if is_summary(msgs[i]) else message_text(msgs[i])
        assert text in fake.inputs or (masked[i] is not msgs[i] and
                                       message_text(masked[i]) in summary)
    assert {mt for _, mt in fake.calls} == {plan.summary_max_tokens}


async def _compact(case: Case, masked: Msgs) -> tuple[Any, FakeSummarizer]:
    fake = FakeSummarizer()
    res = await compact_list(masked, case.messages, case.policy, case.window, COUNTER, MODEL,
                             fake, 1_000_000, case.force)
    return res, fake


@SETTINGS
@given(cases())
def test_masking_properties(case: Case) -> None:
    _check_mask(case)


@SETTINGS
@given(cases())
def test_compaction_properties(case: Case) -> None:
    masked = mask_tool_outputs(case.messages,
                               Scope(case.policy, case.window, COUNTER, MODEL)).messages
    res, fake = asyncio.run(_compact(case, masked))
    _check_compaction(case, masked, res, fake)


@settings(SETTINGS, max_examples=400)
@given(cases(single_task=True))
def test_single_task_sessions(case: Case) -> None:
    masked = _check_mask(case).messages
    res, fake = asyncio.run(_compact(case, masked))
    _check_compaction(case, masked, res, fake)
    if res.plan is not None and res.plan.summarizable:
        assert fake.calls  # there was something to summarize, so it was summarized


@settings(SETTINGS, max_examples=200)
@given(cases(), st.integers(0, 6))
def test_reapplying_a_stored_summary(case: Case, grow: int) -> None:
    """A stored plan applied to the same prefix plus new turns gives the same head."""
    masked = mask_tool_outputs(case.messages,
                               Scope(case.policy, case.window, COUNTER, MODEL)).messages
    res, _ = asyncio.run(_compact(case, masked))
    if not res.rewritten:
        return
    extra = [user("one more"), *_calls(random.Random(grow), ["grep"] * max(1, grow), 5)]
    again = apply_summary(masked + extra, res.plan, res.summary, case.policy)
    assert again == res.messages + extra
    assert ordering_problems(again) == []
