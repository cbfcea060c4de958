"""Hot reload of the policies folder while the server runs (SPEC section 7)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from proxy.testing.harness import Harness

MODEL = "reload-model"


def platform(window: int, extra: str = "") -> str:
    return f"models: {{{MODEL}: {{context_window: {window}}}}}\n{extra}"


def window_seen(client: openai.OpenAI) -> int:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}])
    return int(raw.headers["X-Context-Window"])


def wait_for(predicate: Callable[[], bool], seconds: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not within {seconds} s")
        time.sleep(0.02)
    return time.monotonic() - start


def test_yaml_change_applies_within_two_seconds_and_broken_file_is_rejected(
        make_harness: Callable[..., Harness], tmp_path: Path,
        caplog: pytest.LogCaptureFixture, sdk) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "platform.yaml").write_text(platform(32_000))
    h = make_harness(env={"CONTEXT_PROXY_POLICIES": str(folder)})
    client = sdk(h, h.create_key("acme"))
    assert window_seen(client) == 32_000

    (folder / "platform.yaml").write_text(platform(16_000))
    took = wait_for(lambda: window_seen(client) == 16_000, 2.0)
    assert all(window_seen(client) == 16_000 for _ in range(5))  # and it stays
    assert h.metric("context_proxy_policy_reloads_total") == 1
    print(f"\nYAML change in force after {took:.2f} s")

    # An organization file added beside platform.yaml is picked up the same way.
    (folder / "acme.yaml").write_text(
        "orgs: {acme: {policy: {models: {reload-model: {context_window: 8000}}}}}\n")
    wait_for(lambda: window_seen(client) == 8_000, 2.0)
    (folder / "acme.yaml").unlink()
    wait_for(lambda: window_seen(client) == 16_000, 2.0)

    caplog.set_level(logging.INFO, logger="context_proxy.policy")
    broken = [  # (file, text, what the log line must name)
        ("teams.yaml", "orgs: {acme: {policy: {masking: {enabled: maybe}}}}\n",
         "orgs.acme.policy.masking.enabled"),
        ("platform.yaml", "models: [unclosed\n", "not valid YAML at line 2"),
        ("platform.yaml", platform(64_000, "defaults: {compaction: {nope: 1}}\n"),
         "defaults.compaction.nope"),
        ("platform.yaml", platform(64_000, "defaults: {masking: {keep_recent: many}}\n"),
         "defaults.masking.keep_recent"),
        ("platform.yaml", platform(64_000, "bounds: {compaction.trigger_ratio: {max: 7}}\n"),
         "bounds.compaction.trigger_ratio.max"),
    ]
    errors = h.metric("context_proxy_policy_reload_errors_total")
    for name, text, key in broken:
        caplog.clear()
        (folder / name).write_text(text)
        errors += 1
        wait_for(lambda e=errors: h.metric("context_proxy_policy_reload_errors_total") == e,
                 2.0)
        lines = [r.getMessage() for r in caplog.records if r.name == "context_proxy.policy"
                 and r.levelno >= logging.ERROR]
        assert len(lines) == 1 and "\n" not in lines[0], lines
        assert str(folder / name) in lines[0] and key in lines[0], lines[0]
        assert all(window_seen(client) == 16_000 for _ in range(3))  # last good policy
        if name != "platform.yaml":
            (folder / name).unlink()
    time.sleep(0.8)  # a broken file is logged once, not on every poll
    assert h.metric("context_proxy_policy_reload_errors_total") == errors

    (folder / "platform.yaml").write_text(platform(24_000))  # fixed: applies again
    wait_for(lambda: window_seen(client) == 24_000, 2.0)


def test_half_written_file_is_not_loaded(tmp_path: Path) -> None:
    from proxy.policy.platform import load_policies
    from proxy.policy.watch import FolderWatcher

    (tmp_path / "platform.yaml").write_text(platform(32_000))
    w = FolderWatcher(tmp_path, load_policies(tmp_path))
    (tmp_path / "platform.yaml").write_text("")  # an editor truncated the file...
    assert w.poll() is None  # ...seen once: wait for it to settle
    (tmp_path / "platform.yaml").write_text(platform(16_000))  # ...and wrote it whole
    assert w.poll() is None
    cfg = w.poll()
    assert cfg is not None and cfg.defaults["models"] == {MODEL: 16_000}
    assert w.poll() is None and w.reloads == 1 and w.errors == 0


def test_write_by_another_connection_reaches_running_server(
        make_harness: Callable[..., Harness]) -> None:
    from proxy.policy.rows import write_layer
    from proxy.store import Store

    h = make_harness(env={})
    assert h.state.policies.resolve("acme").compaction.trigger_ratio == 0.8
    other = Store(h.settings.store_target)  # another connection: the CLI, another replica
    try:
        other.atomic(write_layer, "acme", None, {"compaction.trigger_ratio": 0.6})
    finally:
        other.close()
    wait_for(lambda: h.state.policies.resolve("acme").compaction.trigger_ratio == 0.6, 1.0)
