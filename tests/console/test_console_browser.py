"""The admin console in headless Chromium: each step is checked in what the proxy then does
(the admin API's effective view, or a chat request's headers), not only on the page."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import openai
from console_support import MODEL, PLATFORM, Console, sign_in, submit
from factories import assistant, synchronous, system, tool_turn, user, words
from playwright.sync_api import Page, expect

# The screenshots the README shows: taken on every run, written over the committed ones only
# when asked (SCREENSHOTS=docs), so a test run leaves the work tree as it found it.
DOCS = Path(__file__).resolve().parents[2] / "docs" if os.environ.get("SCREENSHOTS") == "docs" \
    else Path(tempfile.mkdtemp(prefix="console-shots-"))
TRIGGER = "compaction.trigger_ratio"


def field(page: Page, name: str) -> Any:
    return page.locator(f"[name='{name}']")


def save(page: Page) -> None:
    submit(page, page.locator("#save").click)


def test_edit_clamp_lock_rerank_and_use_the_platform_default(page: Page,
                                                             console: Console) -> None:
    console.h.create_key("acme", "alice")
    sign_in(page, console)
    expect(page.get_by_role("heading", name="Organizations")).to_be_visible()
    submit(page, page.get_by_role("link", name="Context & retrieval").first.click)
    expect(page.get_by_role("heading", level=1)).to_contain_text("acme")

    # A change within the bounds: stored, and in force.
    field(page, TRIGGER).fill("0.7")
    save(page)
    expect(page.locator(".notice")).to_contain_text("Saved")
    got = console.view("acme")[TRIGGER]
    assert (got["effective"], got["org"], got["clamped"]) == (0.7, 0.7, False)

    # Above the platform's bound: the row says clamped (and why), the proxy runs the bound.
    field(page, TRIGGER).fill("0.99")
    save(page)
    row = page.locator("#row-compaction-trigger_ratio")
    expect(row.locator(".badge.clamped")).to_be_visible()
    expect(row.locator(".effective")).to_have_text("0.95")
    expect(row).to_contain_text("at most 0.95")
    got = console.view("acme")[TRIGGER]
    assert (got["effective"], got["org"], got["clamped"]) == (0.95, 0.99, True)

    console.refusals |= {400, 409}
    # A bad value is refused with the field named; the other inputs keep what was typed.
    field(page, "compaction.keep_ratio").fill("lots")
    field(page, "masking.keep_recent").fill("3")
    save(page)
    expect(page.locator("#form-error")).to_contain_text("compaction.keep_ratio")
    expect(field(page, "compaction.keep_ratio")).to_have_attribute("aria-invalid", "true")
    expect(field(page, "masking.keep_recent")).to_have_value("3")
    expect(field(page, "compaction.keep_ratio")).to_be_focused()  # console.js
    after = console.view("acme")
    assert after["masking.keep_recent"]["org"] is None
    assert after["compaction.keep_ratio"]["org"] is None

    # A locked field cannot be edited: its input is disabled and says why; a forced submit
    # is refused by the same check as the admin API (409), and nothing is written.
    page.goto(console.ui + "orgs/acme/policy")
    locked = field(page, "masking.in_steps")
    expect(locked).to_be_disabled()
    expect(page.locator("#row-masking-in_steps")).to_contain_text("Locked by the platform")
    expect(page.locator("#row-masking-in_steps .badge.locked")).to_be_visible()
    before = console.stored_layers()
    locked.evaluate("el => { el.disabled = false; el.value = 'false'; }")
    save(page)
    expect(page.locator("#form-error")).to_contain_text("masking.in_steps")
    expect(page.locator("#form-error")).to_contain_text("locked")
    assert console.stored_layers() == before
    assert console.view("acme")["masking.in_steps"]["org"] is None

    # The rerank toggle sits on the same page.
    page.goto(console.ui + "orgs/acme/policy")
    expect(page.locator("#rerank-state")).to_have_text("off")
    submit(page, page.locator("#rerank-toggle").click)
    expect(page.locator("#rerank-state")).to_have_text("on")
    assert console.view("acme")["rerank.enabled"]["effective"] is True
    page.screenshot(path=str(DOCS / "console-policy.png"), full_page=True)

    # Use the platform default: after a confirmation, the layer is cleared (not copied).
    submit(page, page.locator("#use-default").click)
    expect(page.get_by_role("heading", level=1)).to_contain_text("Use the platform default")
    expect(page.locator("main")).to_contain_text(TRIGGER)
    submit(page, page.locator("#confirm-clear").click)
    expect(page.locator(".notice")).to_contain_text("platform default")
    cleared = console.view("acme")
    assert all(f["org"] is None for f in cleared.values())
    assert cleared[TRIGGER]["effective"] == 0.8
    assert cleared["rerank.enabled"]["effective"] is False
    assert console.stored_layers() == []

    # Sign out: the console is closed again.
    submit(page, page.get_by_role("button", name="Sign out").click)
    expect(page.locator(".notice")).to_contain_text("signed out")
    page.goto(console.ui + "orgs/acme/policy")
    assert page.url.endswith("/admin/ui/login")


def _long_conversation() -> list[dict[str, Any]]:
    """Over the compaction trigger of a 10,000-token window once old tool outputs are masked,
    and a compaction that lasts (what follows the newest call is short)."""
    messages = [system(), user("Migrate the billing module. CODE-4711")]
    for i in range(8):
        messages += tool_turn("read_file", f"FILE-{i} " + words(1250, seed=i),
                              {"path": f"billing/{i}.py"})
    for i in range(4):
        messages += [assistant(f"Step {i}: FACT-{i}. " + words(380, seed=10 + i)),
                     user(f"Continue with step {i + 1}.")]
    return messages


def test_conversation_shows_its_divider_and_spills(page: Page, start_console: Any,
                                                   sdk: Any) -> None:
    console: Console = start_console(synchronous(PLATFORM))  # the summary made at the trigger
    client: openai.OpenAI = sdk(console.h, console.h.create_key("acme"))
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=_long_conversation(),  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": "billing-migration"})
    assert raw.headers["X-Context-Compaction"] == "auto"
    before = int(raw.headers["X-Context-Tokens-Before"])
    after = int(raw.headers["X-Context-Tokens-After"])
    assert int(raw.headers["X-Context-Masked"]) >= 1
    dividers = client.get("/conversations/billing-migration/dividers", cast_to=object)
    divider = dividers["data"][0]  # type: ignore[index]

    sign_in(page, console)
    expect(page.locator(".org").first).to_contain_text("Compactions")
    page.screenshot(path=str(DOCS / "console-organizations.png"), full_page=True)
    submit(page, page.get_by_role("link", name="Conversations").first.click)
    row = page.get_by_role("row").filter(has_text="billing-migration")
    expect(row).to_contain_text(f"{before:,} → {after:,}")
    submit(page, row.get_by_role("link").click)

    shown = page.locator("li.divider")
    expect(shown).to_have_count(1)
    expect(shown.locator(".divider-text")).to_have_text(
        "Earlier messages were summarized to free up context")
    expect(shown.locator(".badge")).to_have_text("auto")
    expect(shown.locator(".tokens")).to_have_text(
        f"{divider['tokens_before']:,} → {divider['tokens_after']:,} tokens")
    shown.locator("summary").click()
    # The fake summary lists the facts of what it read: the newest masked originals within the
    # reading budget; the older ones are listed after it by spill id.
    expect(shown.locator("pre")).to_contain_text("FILE-")
    text = shown.locator("pre").inner_text()
    assert "FILE-0" in text or re.search(r"cleared: [0-9,]+ tokens from \w+; spill [0-9a-f]{16}",
                                         text)
    # What it covered: the tool outputs it summarized, each linked to its spill.
    covered = divider["tool_outputs"]
    assert covered
    expect(shown.locator("ul.covered-outputs a.covered-spill")).to_have_count(len(covered))

    # A retained spill opens in place, on demand.
    link = page.locator("a.spill-link").first
    link.click()
    expect(page.locator("tr.spill-row pre")).to_contain_text("FILE-")
    page.screenshot(path=str(DOCS / "console-conversation.png"), full_page=True)

    submit(page, page.get_by_role("button", name="Sign out").click)
    page.goto(console.ui + "orgs/acme/conversations")
    assert page.url.endswith("/admin/ui/login")


def test_keyboard_only_edit_of_a_user_layer_on_a_narrow_window(page: Page,
                                                                console: Console) -> None:
    console.h.create_key("acme", "alice")
    sign_in(page, console)
    page.set_viewport_size({"width": 400, "height": 800})
    for path in ("", "platform", "orgs/acme/users/alice/policy"):
        page.goto(console.ui + path)
        # Wide tables scroll inside their own box; the page itself never scrolls sideways.
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], (path, widths)
    # The Content-Security-Policy holds in the browser: an injected inline script never runs.
    with page.expect_console_message(lambda m: "Content Security Policy" in m.text):
        page.evaluate("""() => { const s = document.createElement("script");
                                s.textContent = "window.injected = true";
                                document.body.appendChild(s); }""")
    assert page.evaluate("window.injected === undefined")
    assert console.seen_errors and all("Content Security Policy" in e
                                       for e in console.seen_errors)
    console.seen_errors.clear()  # the refusal was the point; nothing else may be logged

    keep = page.get_by_label("masking.keep_recent (user layer)")
    keep.focus()
    page.keyboard.type("3")
    submit(page, lambda: page.keyboard.press("Enter"))  # Enter submits the form
    expect(page.locator(".notice")).to_contain_text("Saved")
    got = console.view("acme", "alice")["masking.keep_recent"]
    assert (got["effective"], got["user"], got["org"]) == (3, 3, None)


OVERLAPS = """() => {
  // Every row of every table on the page, head rows included: no two cells overlap, and no
  // element or line of text of a cell is drawn outside it (what a reader sees as overlap).
  const out = [];
  const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1
      && a.top >= b.top - 1 && a.bottom <= b.bottom + 1;
  const clipped = (e) => {  // visually hidden (the screen-reader-only pattern): not drawn
    for (; e; e = e.parentElement) if (getComputedStyle(e).clip.startsWith("rect")) return true;
    return false;
  };
  const texts = (cell) => {
    const rects = [], walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!n.textContent.trim() || clipped(n.parentElement)) continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      rects.push(...[...range.getClientRects()].map(q => [n.textContent.trim(), q]));
    }
    return rects;
  };
  document.querySelectorAll("table tr").forEach((tr, row) => {
    if (clipped(tr)) return;
    const name = tr.id || `row ${row} of ${tr.closest("table").className || "a table"}`;
    const cells = [...tr.children].map(c => [c, c.getBoundingClientRect()]);
    cells.forEach(([c, r], i) => {
      for (const [d, s] of cells.slice(i + 1)) {
        const w = Math.min(r.right, s.right) - Math.max(r.left, s.left);
        const h = Math.min(r.bottom, s.bottom) - Math.max(r.top, s.top);
        if (w > 1 && h > 1) out.push(`${name}: cell ${i} overlaps ${d.textContent.trim()}`);
      }
      for (const e of c.querySelectorAll("*")) {
        const q = e.getBoundingClientRect();
        if (q.width && q.height && getComputedStyle(e).position !== "absolute" && !inside(q, r))
          out.push(`${name}: a ${e.tagName} of cell ${i} spills out of it`);
      }
      for (const [text, q] of texts(c))
        if (q.width && !inside(q, r))
          out.push(`${name}: text "${text}" of cell ${i} spills out of it`);
    });
  });
  return out;
}"""


def test_policy_page_at_420_px_and_the_clear_of_one_field(page: Page, console: Console) -> None:
    from proxy.policy.rows import write_layer

    # One value the layer stores under a platform lock (ignored), two it stores in force.
    console.h.state.store.atomic(write_layer, "acme", None, {
        "masking.in_steps": False, TRIGGER: 0.7, "masking.keep_recent": 5})
    sign_in(page, console)
    page.set_viewport_size({"width": 420, "height": 900})
    page.goto(console.ui + "orgs/acme/policy")
    expect(page.locator("#row-masking-in_steps .badge.ignored")).to_be_visible()
    assert page.evaluate(OVERLAPS) == []
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], widths

    # The row's Clear removes that one stored value (the ignored one too); the rest stay.
    submit(page, page.locator("#f-masking-in_steps-clear").click)
    expect(page.locator(".notice")).to_contain_text("the layer's other values stay")
    view = console.view("acme")
    assert view["masking.in_steps"]["org"] is None and not view["masking.in_steps"]["ignored"]
    assert (view[TRIGGER]["org"], view["masking.keep_recent"]["org"]) == (0.7, 5)
    expect(page.locator("#f-masking-in_steps-clear")).to_have_count(0)  # nothing stored there
    # Enter in an input still saves (the form's default button), never a row's Clear.
    field(page, "masking.keep_recent").fill("4")
    submit(page, lambda: field(page, "masking.keep_recent").press("Enter"))
    expect(page.locator(".notice")).to_contain_text("Saved")
    after = console.view("acme")
    assert (after[TRIGGER]["org"], after["masking.keep_recent"]["org"]) == (0.7, 4)
