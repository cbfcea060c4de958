"""Codex CLI 0.171.0 (``codex exec``, Responses API, streamed) in a 25-read session through the
proxy: with a custom provider (``model_providers.local``, ``wire_api = "responses"``, plain HTTP)
and with the built-in OpenAI provider (``openai_base_url`` and ``codex login --with-api-key``),
which first speaks the Responses API over a WebSocket (``GET /v1/responses`` with an upgrade).

``gpt-5.5``, a current name: Codex then sends its freeform ``apply_patch`` custom tool and asks
for encrypted reasoning. Codex's own compaction stays off (no ``model_context_window``) in the
first two: the proxy keeps the session inside the window; the last turns it on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_sessions import Outcome, Session, agent_bin, last_json_lines, node_env, start

from proxy.apis import compaction_items as ci
from proxy.context.stages.shared import SUMMARY_OPEN
from proxy.testing import agent_model
from proxy.testing.fake.fake_apis import RESPONSES
from proxy.testing.fake_upstream import Recorded
from proxy.testing.harness import Harness

pytestmark = pytest.mark.agents

MODEL = "gpt-5.5"
WINDOW = 16_384
# gpt-5.6 binds its reasoning items to the history before them (SPEC section 5): the strict
# fake drops any whose prefix changed, and the session must not make it drop one.
BOUND_MODEL = "gpt-5.6"


def common(model: str = MODEL) -> str:
    return f"""model = "{model}"
approval_policy = "never"
sandbox_mode = "danger-full-access"
"""


def codex_env(s: Session) -> dict[str, str]:
    return node_env(s.home, CODEX_HOME=str(s.home), PROXY_KEY=s.key)


def run_codex(s: Session, env: dict[str, str]) -> Outcome:
    done = s.run([agent_bin("codex"), "exec", "--skip-git-repo-check", "--json",
                  agent_model.TASK], env, stdin="")
    messages = [e["item"].get("text", "") for e in last_json_lines(done.stdout)
                if e.get("type") == "item.completed"
                and (e.get("item") or {}).get("type") == "agent_message"]
    errors = [json.dumps(e) for e in last_json_lines(done.stdout)
              if e.get("type") in ("error", "turn.failed")]
    return Outcome(done.returncode, messages[-1] if messages else "",
                   output=f"events: {' '.join(errors)[-1500:]}\nstderr: {done.stderr[-2000:]}")


def test_codex_with_a_custom_provider(make_harness: Callable[..., Harness],
                                      tmp_path: Path) -> None:
    s = start(make_harness, tmp_path, MODEL, WINDOW)
    (s.home / "config.toml").write_text(common() + f"""model_provider = "local"

[model_providers.local]
name = "context-proxy"
base_url = "{s.harness.base_url}"
env_key = "PROXY_KEY"
wire_api = "responses"
""")
    s.check(run_codex(s, codex_env(s)))


@pytest.mark.parametrize(("model", "window"), [(MODEL, WINDOW), (BOUND_MODEL, 24_576)])
def test_codex_with_the_built_in_provider(make_harness: Callable[..., Harness],
                                          tmp_path: Path, model: str, window: int) -> None:
    """The built-in provider tries the WebSocket mode first (SPEC section 11)."""
    s = start(make_harness, tmp_path, model, window)
    (s.home / "config.toml").write_text(common(model)
                                        + f'openai_base_url = "{s.harness.base_url}"\n')
    env = codex_env(s)
    login = s.run([agent_bin("codex"), "login", "--with-api-key"], env, stdin=s.key + "\n",
                  timeout=60)
    assert login.returncode == 0, login.stdout + login.stderr
    outcome = run_codex(s, env)
    sockets = [a for a in s.agent_answers() if a.method == "GET" and a.path == "/v1/responses"]
    upgraded = [a for a in sockets if a.status == 101]
    said = (sockets[0].error or "")[:300] if sockets else ""
    problems = [] if upgraded else [
        f"no WebSocket session: {len(sockets)} GET /v1/responses answered "
        f"{sorted({a.status for a in sockets})}: {said}"]
    failed = problems + s.failures(outcome)
    assert not failed, "\n".join(["", *failed, s.report()])


AUTO_COMPACT = 12_000  # tokens: Codex's own compaction fires a few times in its 25 reads


def trigger_requests(s: Session) -> list[Recorded]:
    """Requests ending in ``compaction_trigger`` that reached the fake."""
    return [r for r in s.fake.requests if r.path == RESPONSES and r.body
            and ci.ends_in_trigger(r.json)]


def in_band_failures(s: Session, outcome: Outcome, serves: bool) -> list[str]:
    """What did not hold of a session whose compaction Codex made in band: it ran, exactly one
    compaction item came back each time, every fact survived, no proxy-made item went up."""
    triggers = trigger_requests(s)
    refused = [r for r in s.fake.requests if r.refused]
    expected = [] if serves else [r for r in refused if "compaction_trigger" in r.refused]
    failed = [] if triggers else ["Codex's compaction never ran: no compaction_trigger upstream"]
    if outcome.returncode != 0:
        failed.append(f"the agent exited {outcome.returncode}: {outcome.output[-3000:]}")
    if len(expected) != (0 if serves else 1) or len(refused) != len(expected):
        failed.append(f"refusals: {[r.refused for r in refused][:3]}")
    carried = [i for r in s.fake.requests if r.path == RESPONSES and r.body
               for i in r.json.get("input") or [] if isinstance(i, dict)]
    if any(ci.proxy_summary(i) is not None for i in carried):
        failed.append("a compaction item the proxy made reached the upstream")
    summaries = [i for i in carried if i.get("type") == "message"
                 and str(i.get("content")).startswith(SUMMARY_OPEN)]
    if not serves and not summaries:
        failed.append("no expanded compaction summary reached the upstream")
    return failed + every_fact_failures(s, outcome.final)


def every_fact_failures(s: Session, final: str) -> list[str]:
    """Every planted fact is in the final answer or in a spill it names. (Not "every file
    read, as the upstream saw it": a read just before a compaction the proxy answers is only
    in that trigger request, which never goes upstream.)"""
    spills = agent_model.named_spills(final)
    spilled = " ".join(t for t in (s.spill_text(x) for x in spills) if t)
    missing = [agent_model.fact(i) for i in range(1, s.calls + 1)
               if agent_model.fact(i) not in final and agent_model.fact(i) not in spilled]
    return [f"{len(missing)} fact(s) neither in the final answer nor in a spill it names: "
            f"{missing}; final answer: {final[-1500:]!r}"] if missing else []


@pytest.mark.parametrize("serves", [True, False], ids=["upstream-serves", "proxy-answers"])
def test_codex_compacts_in_band_with_the_built_in_provider(
        make_harness: Callable[..., Harness], tmp_path: Path, serves: bool) -> None:
    """Codex's own auto-compaction ("remote compaction v2", ``compaction_trigger``) with the
    built-in provider: served by the upstream, or answered by the proxy where the upstream
    refuses the trigger (SPEC section 11); every planted fact survives."""
    s = start(make_harness, tmp_path, MODEL, WINDOW)
    s.fake.serves_compaction_trigger = serves
    (s.home / "config.toml").write_text(
        common() + f'openai_base_url = "{s.harness.base_url}"\n'
        f"model_context_window = {WINDOW}\nmodel_auto_compact_token_limit = {AUTO_COMPACT}\n")
    env = codex_env(s)
    login = s.run([agent_bin("codex"), "login", "--with-api-key"], env, stdin=s.key + "\n",
                  timeout=60)
    assert login.returncode == 0, login.stdout + login.stderr
    outcome = run_codex(s, env)
    failed = in_band_failures(s, outcome, serves)
    assert not failed, "\n".join(["", *failed, s.report()])
