"""The admin console's test support: a proxy with an admin token and a policies folder, one
headless Chromium per test module (Debian's ``chromium``; no browser download), and helpers.
Its fixtures are registered in conftest.py."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from needs import need
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

TOKEN = "console-admin-token-0123"
MODEL = "console-model"
WINDOW = 10_000
REFUSED = re.compile(r"Failed to load resource: the server responded with a status of (\d+) .*")
CHROMIUM = shutil.which("chromium") or "chromium"  # Debian's, on PATH
# Chromium's background services would try to reach the internet, which this machine has not.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-default-apps", "--disable-extensions", "--mute-audio"]
PLATFORM = f"""\
models: {{{MODEL}: {{context_window: {WINDOW}}}}}
defaults: {{masking: {{priced: false}}}}
locks: [masking.in_steps]
bounds: {{compaction.trigger_ratio: {{min: 0.5, max: 0.95}}}}
orgs:
  yamlco: {{policy: {{compaction: {{trigger_ratio: 0.7}}}}}}
"""


@dataclass
class Console:
    """A running proxy whose console is on; ``api`` reads the admin API's effective view."""

    h: Harness
    base: str  # http://127.0.0.1:port
    seen_errors: list[str] = field(default_factory=list)
    # Statuses a test expects as answers to the page itself (a refused write answers 400 or
    # 409, and Chromium logs each such answer as a console error).
    refusals: set[int] = field(default_factory=set)

    @property
    def ui(self) -> str:
        return self.base + "/admin/ui/"

    def api(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(method, self.base + path, timeout=30,
                             content=None if body is None else json.dumps(body),
                             headers={"Authorization": f"Bearer {TOKEN}"})

    def view(self, org: str, user: str | None = None) -> dict[str, Any]:
        path = f"/admin/orgs/{org}/users/{user}/policy" if user else f"/admin/orgs/{org}/policy"
        resp = self.api("GET", path)
        assert resp.status_code == 200, resp.text
        return resp.json()["fields"]  # type: ignore[no-any-return]

    def stored_layers(self) -> list[tuple[str, str, str]]:
        rows = self.h.state.store.read(
            'SELECT org, "user", fields FROM policy_layers ORDER BY 1, 2')
        return [tuple(r) for r in rows]


@pytest.fixture
def start_console(make_harness: Callable[..., Harness], tmp_path: Path
                  ) -> Callable[..., Console]:
    def start(platform: str = PLATFORM, **env: str) -> Console:
        folder = tmp_path / "policies"
        folder.mkdir(exist_ok=True)
        (folder / "platform.yaml").write_text(platform)
        h = make_harness(fake=FakeUpstream(models={MODEL: WINDOW}),
                         env={"CONTEXT_PROXY_ADMIN_TOKEN": TOKEN,
                              "CONTEXT_PROXY_POLICIES": str(folder), **env})
        return Console(h, h.base_url.removesuffix("/v1"))

    return start


@pytest.fixture
def console(start_console: Callable[..., Console]) -> Console:
    return start_console()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        need("Chromium (the chromium command, on PATH)", "apt-get install -y chromium "
             "(Debian's package; no browser download); .ci/run does it in CI")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, console: Console) -> Iterator[Page]:
    """A fresh browser context (no cookies) at 1280 px; every console error or page error
    (a Content-Security-Policy violation among them) is collected in ``console.seen_errors``
    and fails the test at its end."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()

    def on_console(msg: ConsoleMessage) -> None:
        refused = REFUSED.fullmatch(msg.text)
        if refused and int(refused[1]) in console.refusals and msg.location["url"] in (
                pg.url, ""):
            return
        if msg.type in ("error", "warning"):
            console.seen_errors.append(f"{msg.type}: {msg.text} ({msg.location['url']})")

    pg.on("console", on_console)
    pg.on("pageerror", lambda exc: console.seen_errors.append(f"pageerror: {exc}"))
    yield pg
    context.close()
    assert console.seen_errors == []


def submit(page: Page, act: Callable[[], Any]) -> None:
    """Do what submits a form or follows a link, and wait for the page it leads to (so no
    assertion can pass on the page before it)."""
    with page.expect_navigation():
        act()


def sign_in(page: Page, console: Console, token: str = TOKEN) -> None:
    """Sign in with the keyboard only: the token field is focused on load, Enter submits."""
    page.goto(console.ui)
    assert page.url.endswith("/admin/ui/login")
    expect(page.get_by_label("Admin token")).to_be_focused()
    page.keyboard.type(token)
    with page.expect_navigation():
        page.keyboard.press("Enter")
