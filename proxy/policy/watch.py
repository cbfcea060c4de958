"""Hot reload: watch the policies folder and the stored layers while the server runs.

One background task (started from ``cleanup_ctx``) ticks every ``TICK_S``:

- Stored layers: ``PolicyService.refresh`` notices commits of any process (the CLI,
  another replica) through the ``policy_version`` row, and reloads them.
- YAML: the folder's ``*.yaml`` files are compared by (name, size, mtime) every tick and by
  content every ``CONTENT_EVERY`` ticks (mtime can be too coarse to see two quick edits). A
  change is applied once the content has been stable for one tick, so an editor's half-written
  file is never loaded. The whole folder is re-parsed (``proxy.settings.load_policies``); a broken
  folder is rejected whole: one log line naming the file and key, the
  ``context_proxy_policy_reload_errors_total`` counter, and the last good policy stays in force.

A change is in force within about 0.5 s. Upstream and auth settings are read at startup only: a
change to them is logged as needing a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from pathlib import Path

from proxy.errors import ConfigError
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.policy.platform import PlatformConfig, load_policies
from proxy.store.base import StoreUnavailable

log = logging.getLogger("context_proxy.policy")

TICK_S = 0.25
CONTENT_EVERY = 8

Signature = tuple[tuple[str, int, int], ...]


def _stat_signature(folder: Path) -> Signature:
    out = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            st = path.stat()
        except OSError:  # deleted between glob and stat: the next tick sees it gone
            continue
        out.append((path.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _content_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.yaml")):
        h.update(path.name.encode() + b"\0")
        with contextlib.suppress(OSError):
            h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


class FolderWatcher:
    """Decides when the folder changed; ``poll`` returns a new config, or None (no change or
    rejected). ``on_error``/``on_reload`` are called once per rejected/applied change."""

    def __init__(self, folder: Path, applied: PlatformConfig) -> None:
        self.folder = folder
        self.applied = applied
        self._signature = _stat_signature(folder) if folder.is_dir() else ()
        self._hash = _content_hash(folder) if folder.is_dir() else ""
        self._pending: str | None = None
        self._ticks = 0
        self.errors = 0
        self.reloads = 0

    def poll(self) -> PlatformConfig | None:
        self._ticks += 1
        signature = _stat_signature(self.folder) if self.folder.is_dir() else ()
        if (signature == self._signature and self._pending is None
                and self._ticks % CONTENT_EVERY):
            return None
        self._signature = signature
        digest = _content_hash(self.folder) if self.folder.is_dir() else ""
        if digest == self._hash:
            self._pending = None
            return None
        if digest != self._pending:  # changed since the last tick: wait until it settles
            self._pending = digest
            return None
        self._pending, self._hash = None, digest
        try:
            cfg = load_policies(self.folder)
        except ConfigError as e:
            self.errors += 1
            log.error("policy reload rejected, the last good policy stays in force: %s", e)
            return None
        self.reloads += 1
        old = self.applied
        if (cfg.upstream_url, cfg.api_key_env, cfg.auth_mode) != (
                old.upstream_url, old.api_key_env, old.auth_mode):
            log.warning("policy reload: upstream and auth settings take effect at restart only")
        self.applied = cfg
        log.info("policy reloaded from %s (%d YAML organizations)", self.folder, len(cfg.orgs))
        return cfg


async def watch(service: PolicyService, folder: Path | None, metrics: Metrics | None = None,
                tick_s: float = TICK_S) -> None:
    """Run forever: refresh stored layers and reload the folder on change (see module doc).
    ``metrics`` also gets the time of each good load, the first being the policy in force now
    (``serve`` does not start on a bad one)."""
    watcher = FolderWatcher(folder, service.platform) if folder is not None else None
    if metrics is not None:
        metrics.policy_loaded()
    while True:
        await asyncio.sleep(tick_s)
        try:
            if await service.refresh() and metrics is not None:
                metrics.policy_loaded()
            if watcher is None:
                continue
            errors = watcher.errors
            cfg = await asyncio.to_thread(watcher.poll)
            if watcher.errors != errors and metrics is not None:
                metrics.policy_reload(ok=False)
            if cfg is not None:
                service.set_platform(cfg)
                if metrics is not None:
                    metrics.policy_reload(ok=True)
        except asyncio.CancelledError:
            raise
        except StoreUnavailable:  # the store's own outage line says it; the policy stands
            pass
        except Exception:  # never let the watcher die: the policy would silently freeze
            log.exception("policy watcher tick failed")
