"""The real Codex CLI (its built-in provider, which speaks the Responses API over a WebSocket
first) against the proxy: it stays on the socket, never meets a 405, and its tool turn reaches
the upstream whole (the socket's ``previous_response_id`` expanded by the proxy).

Needs Node and the ``codex`` command (``agent_sessions.agent_bin``: ``CONTEXT_PROXY_AGENTS_BIN``,
the clone's ``.agents``, or ``PATH``); skipped without them, a failure under
``CONTEXT_PROXY_REQUIRE_ALL=1``. A real agent: marked ``agents``, as the sessions of tests/agents.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_sessions import agent_bin, node_env

from proxy.testing.fake.fake_apis import RESPONSES
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape

MODEL = "gpt-4.1"

pytestmark = pytest.mark.agents


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """A shell call first, then an answer once its output came back."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return {"role": "assistant", "content": "The command printed hi."}
    return {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_echo", "type": "function",
        "function": {"name": "exec_command", "arguments": json.dumps({"cmd": "echo hi"})}}]}


def codex(args: list[str], home: Path, cwd: Path, stdin: str | None = None
          ) -> subprocess.CompletedProcess[str]:
    env = node_env(home, CODEX_HOME=str(home / "codex"))
    return subprocess.run([agent_bin("codex"), *args], cwd=cwd, env=env, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180, check=False)


def metric_lines(h: Harness, route: str) -> dict[str, float]:
    """The route's request counts by status class (the classes it has answered)."""
    text = scrape(h.base_url)
    counts = {c: metric(text, "context_proxy_requests_total", route=route, status_class=c)
              for c in ("1xx", "2xx", "3xx", "4xx", "5xx")}
    return {c: n for c, n in counts.items() if n}


def run_codex(h: Harness, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``codex exec`` of a one-command task, its built-in provider pointed at the proxy."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / "codex").mkdir(parents=True)
    work.mkdir()
    (home / "codex" / "config.toml").write_text(
        f'openai_base_url = "{h.base_url}"\nmodel = "{MODEL}"\napproval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n')
    login = codex(["login", "--with-api-key"], home, work, stdin=h.create_key("acme"))
    assert login.returncode == 0, login.stderr
    run = codex(["exec", "--skip-git-repo-check", "--json", "Run echo hi"], home, work)
    assert run.returncode == 0, run.stderr[-2000:]
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    assert any(i["type"] == "command_execution" and i["exit_code"] == 0 for i in items)
    assert items[-1] == {**items[-1], "type": "agent_message", "text": "The command printed hi."}
    sent = [r.json for r in h.fake.requests if r.path == RESPONSES]
    assert len(sent) == 2 and all("previous_response_id" not in b for b in sent)
    assert sent[1]["input"][:len(sent[0]["input"])] == sent[0]["input"]
    assert sent[1]["input"][-1]["type"] == "function_call_output"
    return run


def test_codex_speaks_to_the_proxy_over_its_websocket(
        make_harness: Callable[..., Harness], tmp_path: Path) -> None:
    h = make_harness(fake=FakeUpstream(models={MODEL: 128_000}, responder=respond))
    run = run_codex(h, tmp_path)
    assert "405" not in run.stdout + run.stderr and "Reconnecting" not in run.stdout
    sockets = metric_lines(h, "responses_ws")
    assert sockets.get("2xx", 0) >= 3 and set(sockets) == {"2xx"}  # a warmup, two turns
    assert metric_lines(h, "responses") == {}  # no HTTP fallback


def test_with_the_mode_off_codex_uses_http_at_once(
        make_harness: Callable[..., Harness], tmp_path: Path) -> None:
    h = make_harness(fake=FakeUpstream(models={MODEL: 128_000}, responder=respond),
                     responses_websocket=False)
    run = run_codex(h, tmp_path)
    assert "Reconnecting" not in run.stdout
    assert metric_lines(h, "responses_ws") == {"4xx": 1.0}
    assert metric_lines(h, "responses") == {"2xx": 2.0}
