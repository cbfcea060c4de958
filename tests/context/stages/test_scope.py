"""What the stages work against (``proxy.context.stages.scope.Scope``): the window compaction
uses (the fallback when unknown), the request's cost beyond its messages, counting with the
request's tools."""

from __future__ import annotations

from proxy.context.stages.scope import Scope
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.formula import REPLY_PRIMING
from proxy.policy.model import Policy
from proxy.testing.agent import TOOLS

COUNTER = TokenCounter()
MESSAGES = [{"role": "user", "content": "count me"}]


def test_the_window_is_the_known_one_else_the_fallback() -> None:
    assert Scope(Policy(), 32_000, COUNTER, "gpt-4o").compaction_window == 32_000
    unknown = Scope(Policy(fallback_window=50_000), None, COUNTER, "gpt-4o")
    assert unknown.compaction_window == 50_000
    assert unknown.with_window(8_000).compaction_window == 8_000 and unknown.window is None


def test_tools_cost_tokens_beyond_the_messages() -> None:
    bare = Scope(Policy(), None, COUNTER, "gpt-4o")
    tooled = Scope(Policy(), None, COUNTER, "gpt-4o", TOOLS)
    assert bare.overhead() == REPLY_PRIMING and bare.tools_tokens == 0
    assert tooled.tools_tokens == COUNTER.tools_tokens(TOOLS, "gpt-4o") > 0
    assert tooled.overhead() == REPLY_PRIMING + tooled.tools_tokens
    assert tooled.count(MESSAGES) == COUNTER.count_messages(MESSAGES, "gpt-4o", TOOLS)
    assert tooled.count(MESSAGES) - bare.count(MESSAGES) == tooled.tools_tokens
