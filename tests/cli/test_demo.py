"""``context-proxy demo``: the shared generator's demo session through the proxy, one table row a
turn (what the client sent, what the upstream received, what the proxy did)."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import openai
import pytest

from proxy.cli import demo
from proxy.context.tokens.counter import TokenCounter
from proxy.testing import agent

ROOT = Path(__file__).resolve().parents[2]
TURNS = demo.TURNS  # masking steps from turn 21, the compaction at 76


def test_demo_plays_the_shared_session_and_prints_its_table() -> None:
    assert demo.SESSION == agent.DEMO_STAGES and demo.WINDOW == 65_536
    out = io.StringIO()
    assert demo.run_demo(turns=TURNS, out=out) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith(f"context-proxy demo: {TURNS} agent turns, model window 65,536 "
                               "tokens, upstream http://127.0.0.1:")
    assert lines[2].split() == ["turn", "msgs", "client", "upstream", "masked", "compaction",
                                "divider"]
    rows = [line.split() for line in lines[3:lines.index("", 3)]]
    shown = [int(r[0]) for r in rows]  # the first, every 5th, the last and every eventful turn
    assert shown == sorted(shown) and {1, TURNS, *range(5, TURNS, 5)} <= set(shown)
    assert "Rows: turn 1, every 5th turn, the last, and every turn where" in text
    counter = TokenCounter()
    for turn, row in zip(shown, rows, strict=True):
        sent = agent.conversation(demo.SESSION, turn - 1)  # the opening and the turns before
        client = counter.count_messages(sent, demo.MODEL, agent.TOOLS)
        assert row[:3] == [str(turn), str(len(sent)), f"{client:,}"], row
        assert int(row[3].replace(",", "")) <= client  # the upstream never gets more
        assert row[5] in ("none", "reused", "auto", "insufficient"), row
    assert rows[0][3] == rows[0][2] and rows[0][4:6] == ["0", "none"]  # nothing to do yet
    assert [r[5] for r in rows].count("auto") >= 1
    steps = [r for r in rows if int(r[4]) > 0 and r[5] != "auto"]  # masking at the defaults
    assert steps and all(int(r[3].replace(",", "")) < int(r[2].replace(",", "")) for r in steps)
    assert int(steps[0][0]) < int(next(r for r in rows if r[5] == "auto")[0])  # as documented
    assert "Why both stages show: a turn adds ~" in text
    assert int(rows[-1][3].replace(",", "")) <= demo.WINDOW
    assert re.search(rf"Fact buried in turn 3's tool output \({agent.DEMO_FACT}\) at the last "
                     r"turn: readable from spill [0-9a-f]{16}, which that request names", text)
    assert f"Dividers (GET /v1/conversations/{demo.CONVERSATION}/dividers):" in text
    assert "  div_" in text.split("Dividers (GET")[1]
    assert "Legend: client/upstream = prompt tokens" in text
    examples = text.split("A masked tool output, as the upstream received it:\n")[1]
    placeholder, _, rest = examples.partition("\n")
    assert re.fullmatch(r"\[tool output cleared: [0-9,]+ tokens from (read_file|run_tests|grep); "
                        r"spill [0-9a-f]+\]", placeholder.strip()), placeholder
    summary = rest.split("The summary the upstream received in place of the older turns:\n")[1]
    assert summary.startswith("  Goal: continue the task.")  # the demo's upstream wrote it
    turn = next(r for r in rows if r[5] == "auto")[0]
    headers = text.split(f"Headers of the answer to turn {turn}, the first that compacted:\n")[1]
    got = dict(line.strip().split(": ", 1) for line in headers.splitlines() if line.strip())
    assert got["x-context-compaction"] == "auto"
    divider = next(r for r in rows if r[5] == "auto")[6]
    assert got["x-context-divider-id"].startswith(divider)
    assert got["x-conversation-id"] == demo.CONVERSATION
    assert int(got["x-context-cost-spent"]) > 0 and "x-context-cost-saved" in got
    money = re.search(r"spent upstream \$([0-9.]+); the client's own requests would have cost "
                      r"\$([0-9.]+) without the proxy; saved (-?)\$([0-9.]+)", text)
    assert money is not None, text
    spent, without, sign, saved = money.groups()
    assert 0 < float(spent) < float(without)  # both stages at work, and it pays
    assert float(f"{sign}{saved}") == pytest.approx(float(without) - float(spent), abs=2e-4)
    assert "Reasoning lost: 0 thinking blocks or reasoning items" in text  # binds none


def test_the_table_shows_every_turn_of_a_short_session_and_the_eventful_ones_of_a_long_one(
        ) -> None:
    assert all(demo.shows(t, 10, 0, 0, "none") for t in range(1, 11))
    assert [t for t in range(1, 31) if demo.shows(t, 30, 0, 0, "reused")] == [1, 5, 10, 15, 20,
                                                                               25, 30]
    assert demo.shows(7, 30, 3, 0, "none") and demo.shows(7, 30, 0, 0, "auto")
    assert demo.shows(7, 30, 0, 0, "insufficient") and not demo.shows(7, 30, 3, 3, "reused")


def test_masked_counts_the_placeholders_sent() -> None:
    sent = [{"role": "tool", "content": "[tool output cleared: 1,200 tokens from run; spill ab]"},
            {"role": "tool", "content": "kept"}, {"role": "user", "content": "[tool output "
                                                   "cleared: a user's words]"}]
    assert demo.masked_in(sent) == 1


def run_curl_line(line: str) -> str:
    """The answer to the printed ``curl`` line: run by curl where it is installed, else replayed
    from its own words (URL, ``-H`` headers, ``-d`` body) so a machine with only Python checks
    the same line."""
    if shutil.which("curl"):
        return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30,
                              check=True).stdout
    words = shlex.split(line)
    assert words[:2] == ["curl", "-s"], words
    url, rest = words[2], words[3:]
    pairs = list(zip(rest[::2], rest[1::2], strict=True))
    assert {flag for flag, _ in pairs} <= {"-H", "-d"}, rest
    headers = dict(h.split(": ", 1) for flag, h in pairs if flag == "-H")
    data = next(d for flag, d in pairs if flag == "-d")
    request = urllib.request.Request(url, data=data.encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(answer.read().decode())


def test_run_curl_line_replays_the_words_of_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[urllib.request.Request] = []

    class Answer(io.BytesIO):
        def __enter__(self) -> Answer:
            return self

    def urlopen(request: urllib.request.Request, timeout: float) -> Answer:
        seen.append(request)
        return Answer(b'{"ok": true}')

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    line = ("curl -s http://127.0.0.1:1/v1/chat/completions -H 'Authorization: Bearer cp-x' "
            "-H 'Content-Type: application/json' -d '{\"model\": \"m\"}'")
    assert run_curl_line(line) == '{"ok": true}'
    assert seen[0].full_url == "http://127.0.0.1:1/v1/chat/completions"
    assert seen[0].get_header("Authorization") == "Bearer cp-x"
    assert seen[0].data == b'{"model": "m"}'


@pytest.mark.usefixtures("database_url")
def test_demo_serve_keeps_running_and_its_curl_line_works() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "demo", "--turns", "3",
                             "--serve"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        while not any(line.lstrip().startswith("curl -s") for line in lines):
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        curl = next(line.strip() for line in lines if line.lstrip().startswith("curl -s"))
        body = json.loads(run_curl_line(curl))
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["role"] == "assistant"
        base_url = next(line.split("base_url:")[1].strip() for line in lines
                        if "base_url:" in line)
        key = next(line.split("api key:")[1].strip() for line in lines if "api key:" in line)
        with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0) as client:
            dividers = client.get("/conversations/demo-session/dividers", cast_to=object)
        assert dividers["object"] == "list"  # type: ignore[index]
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.rstrip().endswith("stopped")
