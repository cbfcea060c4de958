"""What the console's totals and charts are made of: the hourly usage the proxy stores
(``usage_hourly``, migration 007) and each conversation's last turn, written in batches."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from console_support import MODEL, PLATFORM, TOKEN, WINDOW, Console
from factories import assistant, system, user, words

from proxy.console.queries import HOURS, hourly_series
from proxy.context.records.hourly import hour_of
from proxy.store import Store
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness


def _rows(store: Store, sql: str) -> list[dict[str, Any]]:
    return [dict(r) for r in store.read(sql)]


def _turn(client: openai.OpenAI, conversation: str, messages: list[dict[str, Any]]
          ) -> tuple[int, int, int, int]:
    """(tokens before, after, the upstream's prompt tokens, its cached tokens) of one turn."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages,  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": conversation})
    usage = raw.parse().usage
    assert usage is not None
    details = usage.prompt_tokens_details
    cached = details.cached_tokens or 0 if details is not None else 0
    return (int(raw.headers["X-Context-Tokens-Before"]),
            int(raw.headers["X-Context-Tokens-After"]), usage.prompt_tokens, cached)


def test_hourly_usage_and_last_turns_are_stored_per_org_and_user(
        console: Console, sdk: Callable[[Harness, str], openai.OpenAI]) -> None:
    h = console.h
    alice = sdk(h, h.create_key("acme", "alice"))
    team = sdk(h, h.create_key("acme"))
    first = [system(), user("Plan the release. " + words(1300))]
    second = [*first, assistant("Planned. " + words(200)), user("Go on.")]
    turns = {"alice": [_turn(alice, "release", first), _turn(alice, "release", second)],
             "": [_turn(team, "triage", [system(), user("Triage " + words(120))])]}
    h.call(h.state.context.records.flush_usage())

    rows = _rows(h.state.store, 'SELECT * FROM usage_hourly ORDER BY "user"')
    assert [(r["org"], r["user"]) for r in rows] == [("acme", ""), ("acme", "alice")]
    for row in rows:
        mine = turns[row["user"]]
        assert row["hour"] == hour_of(row["hour"])
        assert row["requests"] == len(mine)
        assert row["tokens_received"] == sum(t[0] for t in mine)
        assert row["tokens_sent"] == sum(t[1] for t in mine)
        assert row["prompt_tokens"] == sum(t[2] for t in mine)
        assert row["cached_tokens"] == sum(t[3] for t in mine)
        assert row["outcome_auto"] == row["outcome_failed"] == 0
    assert sum(r["cached_tokens"] for r in rows) > 0  # the fake's cache served alice's prefix

    convs = _rows(h.state.store, "SELECT public_id, last_tokens_before, "
                  "last_tokens_after FROM conversations ORDER BY public_id")
    last_alice, last_team = turns["alice"][-1], turns[""][-1]
    assert convs == [
        {"public_id": "release", "last_tokens_before": last_alice[0],
         "last_tokens_after": last_alice[1]},
        {"public_id": "triage", "last_tokens_before": last_team[0],
         "last_tokens_after": last_team[1]}]


@pytest.mark.usefixtures("database_url")
def test_the_overview_shows_stored_usage_after_a_restart(tmp_path: Path) -> None:
    """The figures come from the store, not the Prometheus registry (which restarts empty)."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "platform.yaml").write_text(PLATFORM)
    env = {"CONTEXT_PROXY_ADMIN_TOKEN": TOKEN, "CONTEXT_PROXY_POLICIES": str(folder)}
    with Harness(tmp_path, fake=FakeUpstream(models={MODEL: WINDOW}), env=env) as h, \
            openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"),
                          max_retries=0) as client:
        before, after, _, _ = _turn(client, "only", [system(), user(words(400))])
    # Stopped: its last figures were written on the way out.
    with Harness(tmp_path, fake=FakeUpstream(models={MODEL: WINDOW}), env=env) as h, \
            httpx.Client(base_url=h.base_url.removesuffix("/v1") + "/admin/ui/") as c:
        assert c.post("login", data={"token": TOKEN}).status_code == 303
        page = c.get("").text
        series = hourly_series(h.state.store)
    acme = page[page.index(">acme"):]
    assert f"{before:,}" in acme and f"{after:,}" in acme
    assert series["acme"]["tokens_received"][-1] == before  # the current hour is last
    assert series["acme"]["tokens_sent"] == [0] * (HOURS - 1) + [after]
    points = re.findall(r'class="series-tokens-received" points="([^"]+)"', acme)[0].split()
    assert len(points) == HOURS
    ys = [float(p.split(",")[1]) for p in points]
    assert ys[-1] < ys[0]  # the last hour rises above the empty ones (SVG's y grows down)
