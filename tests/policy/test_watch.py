"""Hot reload (``proxy.policy.watch``): a changed folder is applied once its content held still
for a tick, a broken one is rejected whole (the last good policy stays), a change to upstream
or auth settings is told to need a restart, and the watch task refreshes stored layers and
counts each reload in the metrics."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.policy.platform import load_policies
from proxy.policy.watch import CONTENT_EVERY, FolderWatcher, watch
from proxy.testing.scrape import metric

PLATFORM = "defaults:\n  masking:\n    keep_recent: {n}\n"


def folder_with(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / "platform.yaml").write_text(text)
    return folder


def test_a_change_is_applied_once_it_held_still_for_a_tick(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, PLATFORM.format(n=3))
    watcher = FolderWatcher(folder, load_policies(folder))
    assert watcher.poll() is None  # nothing changed
    (folder / "platform.yaml").write_text(PLATFORM.format(n=4) + "# longer now\n")
    assert watcher.poll() is None  # changed: wait one tick for it to settle
    cfg = watcher.poll()
    assert cfg is not None and cfg.defaults["masking.keep_recent"] == 4
    assert (watcher.reloads, watcher.errors) == (1, 0) and watcher.applied is cfg
    assert watcher.poll() is None


def test_a_same_size_edit_is_found_by_content_within_a_few_ticks(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, PLATFORM.format(n=3))
    watcher = FolderWatcher(folder, load_policies(folder))
    path = folder / "platform.yaml"
    stat = path.stat()
    path.write_text(PLATFORM.format(n=5))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # mtime too coarse to see it
    results = [watcher.poll() for _ in range(CONTENT_EVERY + 1)]
    applied = [c for c in results if c is not None]
    assert len(applied) == 1 and applied[0].defaults["masking.keep_recent"] == 5


def test_a_broken_folder_is_rejected_and_the_restart_only_settings_are_told(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = folder_with(tmp_path, PLATFORM.format(n=3))
    watcher = FolderWatcher(folder, load_policies(folder))
    (folder / "platform.yaml").write_text("defaults:\n  masking:\n    keep_recnt: 1\n")
    with caplog.at_level(logging.INFO, logger="context_proxy.policy"):
        assert watcher.poll() is None and watcher.poll() is None
        assert (watcher.errors, watcher.reloads) == (1, 0)
        assert "reload rejected" in caplog.text and "keep_recnt" in caplog.text
        (folder / "platform.yaml").write_text("auth:\n  mode: passthrough\n")
        watcher.poll()
        assert watcher.poll() is not None
    assert "take effect at restart only" in caplog.text


async def test_the_watch_task_reloads_and_counts(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, PLATFORM.format(n=3))
    service = PolicyService(load_policies(folder))
    metrics = Metrics()
    task = asyncio.create_task(watch(service, folder, metrics, tick_s=0.01))
    await asyncio.sleep(0)  # the task reads the folder as it starts, before it first sleeps
    try:
        (folder / "platform.yaml").write_text(PLATFORM.format(n=6) + "# edited\n")
        for _ in range(500):  # a few ticks: poll, no timing assertion
            if service.resolve("acme").masking.keep_recent == 6:
                break
            await asyncio.sleep(0.01)
        assert service.resolve("acme").masking.keep_recent == 6
        text = metrics.render().decode()
        assert metric(text, "context_proxy_policy_reloads_total") == 1
        assert metric(text, "context_proxy_policy_last_load_success_timestamp_seconds") > 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
