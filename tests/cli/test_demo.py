"""``context-proxy demo``: the shared generator's demo session through the proxy, one table row a
turn (what the client sent, what the upstream received, what the proxy did)."""

from __future__ import annotations

import io

from proxy.cli import demo
from proxy.context.tokens import TokenCounter
from proxy.testing import agent

TURNS = 20  # the first compaction of the demo session comes at turn 20


def test_demo_plays_the_shared_session_and_prints_its_table() -> None:
    assert demo.SESSION == agent.DEMO
    out = io.StringIO()
    assert demo.run_demo(turns=TURNS, out=out) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith(f"context-proxy demo: {TURNS} agent turns, model window 16,384 "
                               "tokens, upstream http://127.0.0.1:")
    assert lines[2].split() == ["turn", "msgs", "client", "upstream", "masked", "compaction",
                                "divider"]
    rows = [line.split() for line in lines[3:3 + TURNS]]
    counter = TokenCounter()
    for turn, row in enumerate(rows, start=1):
        sent = agent.conversation(agent.DEMO, turn - 1)  # the opening and the turns before
        client = counter.count_messages(sent, demo.MODEL, agent.TOOLS)
        assert row[:3] == [str(turn), str(len(sent)), f"{client:,}"], row
        assert int(row[3].replace(",", "")) <= client  # the upstream never gets more
        assert row[5] in ("none", "reused", "auto", "insufficient"), row
    assert rows[0][3] == rows[0][2] and rows[0][4:6] == ["0", "none"]  # nothing to do yet
    assert [r[5] for r in rows].count("auto") >= 1
    assert int(rows[-1][3].replace(",", "")) <= demo.WINDOW
    assert (f"Fact buried in turn 3's tool output ({agent.DEMO_FACT}) still reaches the "
            "upstream at the last turn: yes") in text
    assert f"Dividers (GET /v1/conversations/{demo.CONVERSATION}/dividers):" in text
    assert "  div_" in text.split("Dividers (GET")[1]
