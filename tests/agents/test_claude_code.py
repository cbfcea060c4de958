"""Claude Code 2.1.337 (print mode, Messages API, streamed) in a 25-read session through the proxy.

Two model names: ``claude-opus-5-5``, a current name (Claude Code then sends its environment as a
``{"role": "system"}`` message inside ``messages``, under the
``mid-conversation-tool-changes-2026-07-01`` beta), and ``claude-sonnet-4-5``, an older one (no
such messages). Under both, the fixed part (system and tools) is about 20k tokens. No workaround
variables: the agent runs as a user would run it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_sessions import Outcome, Session, agent_bin, node_env, start

from proxy.testing import agent_model
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape

pytestmark = pytest.mark.agents

WINDOW = 32_768


def run_claude(s: Session) -> Outcome:
    claude = agent_bin("claude")
    env = node_env(
        s.home, ANTHROPIC_BASE_URL=s.origin, ANTHROPIC_API_KEY=s.key, ANTHROPIC_MODEL=s.model,
        ANTHROPIC_SMALL_FAST_MODEL=s.model, ANTHROPIC_DEFAULT_HAIKU_MODEL=s.model,
        ANTHROPIC_DEFAULT_SONNET_MODEL=s.model, ANTHROPIC_DEFAULT_OPUS_MODEL=s.model,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1", DISABLE_AUTOUPDATER="1")
    done = s.run([claude, "-p", agent_model.TASK, "--allowedTools", "Read,Bash,Glob,Grep",
                  "--output-format", "json"], env)
    final, code = "", done.returncode
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {}
    if isinstance(result, dict):
        final = str(result.get("result") or "")
        if result.get("is_error") and code == 0:
            code = 1
    return Outcome(code, final, output=f"stdout: {done.stdout[-2000:]}\nstderr: "
                                       f"{done.stderr[-2000:]}")


@pytest.mark.parametrize("model", ["claude-opus-5-5", "claude-sonnet-4-5"])
def test_claude_code_session(make_harness: Callable[..., Harness], tmp_path: Path,
                             model: str) -> None:
    # Four newest results verbatim: masking clears the older ones, and with the fixed part the
    # four still cross the compaction trigger, so both stages show.
    s = start(make_harness, tmp_path, model, WINDOW, keep_recent=4)
    s.check(run_claude(s))


@pytest.mark.parametrize("window", [32_768, 16_384])
def test_claude_code_on_a_reasoning_bound_model(make_harness: Callable[..., Harness],
                                               tmp_path: Path, window: int) -> None:
    """``claude-opus-5-5`` binds each thinking block to its prefix, and Claude Code sends
    adaptive thinking and replays every block: at the default policy the session compacts,
    no request is refused (the strict fake checks every replayed block's prefix), and no
    block the agent replays was made before a compaction that still stands before it."""
    s = start(make_harness, tmp_path, "claude-opus-5-5", window, keep_recent=None)
    s.check(run_claude(s))
    bodies = [r.json for r in s.agent_requests()]
    assert any(b.get("thinking") for b in bodies), "Claude Code sent no thinking setting"
    replayed = sum(1 for b in bodies for m in b["messages"] if isinstance(m["content"], list)
                   for block in m["content"] if block.get("type") == "thinking")
    assert replayed, "no thinking block was replayed: the prefix check was never exercised"
    assert len(s.dividers()) >= 1
    removed = sum(int(a.headers.get("X-Context-Reasoning-Removed", "0"))
                  for a in s.agent_answers())
    # At 32k the newest turns are carried as text (their thinking counted as removed); at 16k
    # beside Claude Code's 12k fixed part there is room for none.
    assert removed > 0 or window < WINDOW, "no compaction said it removed bound reasoning"
    text = scrape(s.harness.base_url.removesuffix("/v1"))
    assert metric(text, "context_proxy_reasoning_lost_total", model="claude-opus-5-5",
                  cause="compaction") == removed
    assert sum(d["reasoning_removed"] for d in s.dividers()) == removed  # each divider says


def test_claude_code_with_a_20k_fixed_prompt_at_32k(make_harness: Callable[..., Harness],
                                                     tmp_path: Path) -> None:
    """A fixed part (system + tools) of about 20k tokens at a 32k window, under the default
    policy: at most one summary call per two agent requests, and no compaction fails."""
    s = start(make_harness, tmp_path, "claude-sonnet-4-5", WINDOW, keep_recent=None)
    outcome = run_claude(s)
    fixed = [s.fake.measure({"messages": s.chat_of(r)["messages"][:1],
                             "tools": s.chat_of(r)["tools"]})[0] for r in s.agent_requests()[:1]]
    agent_requests, summaries = len(s.agent_requests()), len(s.summary_requests())
    failed_outcomes = s.outcomes().count("failed")
    problems = []
    if outcome.returncode != 0:
        problems.append(f"the agent exited {outcome.returncode}: {outcome.output[-2000:]}")
    if fixed and fixed[0] < 15_000:
        problems.append(f"the fixed part is {fixed[0]} tokens, not the ~20k this test is about")
    if agent_requests < 10:
        problems.append(f"only {agent_requests} agent requests reached the fake")
    if summaries * 2 > agent_requests:
        problems.append(f"{summaries} summary calls for {agent_requests} agent requests "
                        f"(at most one per two)")
    if failed_outcomes:
        problems.append(f"{failed_outcomes} request(s) answered X-Context-Compaction: failed")
    assert not problems, "\n".join(["", *problems, f"fixed part: {fixed}", s.report()])
