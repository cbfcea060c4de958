"""Window discovery (SPEC section 3): how many tokens a model's context holds.

Order, first that answers: the policy's ``models`` table → the upstream's ``/v1/models`` metadata
(``context_length``, ``max_model_len``, ``context_window``; cached with a TTL) → litellm's model
info (``max_input_tokens``) → unknown (``None``). Masking runs only on a known window; compaction
uses the window, or the policy's ``fallback_window`` when it is unknown (``Scope``).

Model names are looked up as given, then without a provider prefix (``openai/gpt-4o`` →
``gpt-4o``), because clients often address models through litellm-style names.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proxy.context.records.learned import LearnedWindows, Stale
from proxy.policy.model import Policy
from proxy.upstream.model_map import model_map

log = logging.getLogger(__name__)

FetchModels = Callable[[], Awaitable[Any]]
"""Returns the upstream's ``GET /v1/models`` JSON (``{"data": [{"id": ..., ...}]}``)."""
LitellmLookup = Callable[[str], int | None]

WINDOW_FIELDS = ("context_length", "max_model_len", "context_window", "max_context_length")
_NESTED = ("meta", "metadata", "top_provider")  # where some providers put the same fields


def _candidates(model: str) -> list[str]:
    names = [model]
    if "/" in model:
        names.append(model.split("/", 1)[1])
    return names


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value > 0:
        return int(value)
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def window_from_entry(entry: Mapping[str, Any]) -> int | None:
    """The window an upstream ``/v1/models`` entry reports, if any."""
    for source in (entry, *(entry.get(k) for k in _NESTED)):
        if isinstance(source, Mapping):
            for field in WINDOW_FIELDS:
                found = _positive_int(source.get(field))
                if found:
                    return found
    return None


def parse_models(payload: Any) -> dict[str, int]:
    """Model id → window from a ``/v1/models`` payload; entries without a window are left out."""
    data = payload.get("data") if isinstance(payload, Mapping) else payload
    out: dict[str, int] = {}
    if isinstance(data, list):
        for entry in data:
            if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
                found = window_from_entry(entry)
                if found:
                    out[entry["id"]] = found
    return out


def litellm_window(model: str) -> int | None:
    """``max_input_tokens`` from litellm's bundled model map, for ``model`` as given or without
    its provider prefix (blocking the first time: the map is read from disk)."""
    known = model_map()
    for name in _candidates(model):
        entry = known.get(name)
        if isinstance(entry, Mapping):
            found = _positive_int(entry.get("max_input_tokens"))
            if found:
                return found
    return None


class WindowResolver:
    """Resolves model windows; one per process. Upstream and litellm answers are cached.

    ``fetch_models`` is called at most once per ``ttl_s`` (concurrent callers share one fetch); a
    failed fetch is remembered for ``error_ttl_s`` so a down upstream is not asked on every
    request. litellm lookups run in a worker thread and are cached per model for the process.
    """

    def __init__(
        self,
        fetch_models: FetchModels | None = None,
        *,
        ttl_s: float = 300.0,
        error_ttl_s: float = 30.0,
        litellm_lookup: LitellmLookup | None = litellm_window,
        clock: Callable[[], float] = time.monotonic,
        shared: LearnedWindows | None = None,
    ) -> None:
        self._fetch = fetch_models
        self._ttl = ttl_s
        self._error_ttl = error_ttl_s
        self._litellm = litellm_lookup
        self._clock = clock
        self._upstream: dict[str, int] = {}
        self._expires = float("-inf")
        self._lock = asyncio.Lock()
        self._litellm_cache: dict[str, int | None] = {}
        self._learned: dict[str, int] = {}
        self._shared = shared  # limits other processes learned (replicas on one store)
        # model -> (policy, (window, source) before the learned caps, valid until): asked on
        # every request, the same answer until the policy or the upstream's list changes.
        self._resolved: dict[str, tuple[Policy, tuple[int | None, str], float]] = {}

    def learn(self, model: str, window: int) -> bool:
        """Remember a limit the upstream stated when it refused a request as too long; it caps
        what any other source says for ``model`` from now on (the upstream is the truth). A new
        or lower limit is logged once, as a warning: a window that shrinks silently would make
        every later compaction of the model hard to explain. True when it was news."""
        old = self._learned.get(model)
        if old is not None and old <= window:
            return False
        self._learned[model] = window
        log.warning("context window of model %r learned from an upstream refusal: %d tokens "
                    "(from now on it caps what the policy, the upstream's /v1/models or litellm "
                    "say)", model, window)
        return True

    async def learn_shared(self, model: str, window: int) -> None:
        """``learn``, and tell the other processes of the store (``LearnedWindows``)."""
        if self.learn(model, window) and self._shared is not None:
            await self._shared.save(model, window)

    async def resolve(self, model: str, policy: Policy) -> tuple[int | None, str]:
        """(window, source): source is ``policy``, ``upstream``, ``litellm``, ``learned`` or
        ``unknown``. A limit the upstream stated (``learn``) caps every other source."""
        hit = self._resolved.get(model)
        if hit is not None and hit[0] is policy and self._clock() < hit[2]:
            window, source = hit[1]
        else:
            window, source = found = await self._resolve(model, policy)
            if len(self._resolved) >= 4096:  # model names come from clients: stay bounded
                self._resolved.clear()
            until = float("inf") if source == "policy" or self._fetch is None else self._expires
            self._resolved[model] = (policy, found, until)
        learned = self._learned.get(model)
        other = None  # the lowest limit any process learned (``LearnedWindows``)
        if self._shared is not None:
            known = self._shared.known(model)
            other = await self._shared.get(model) if isinstance(known, Stale) else known
        if other is not None and (learned is None or other < learned):
            learned = other
        if learned is not None and (window is None or learned < window):
            return learned, "learned"
        return window, source

    async def _resolve(self, model: str, policy: Policy) -> tuple[int | None, str]:
        for name in _candidates(model):
            if name in policy.models:
                return policy.models[name], "policy"
        upstream = await self._upstream_models()
        for name in _candidates(model):
            if name in upstream:
                return upstream[name], "upstream"
        found = await self._from_litellm(model)
        return (found, "litellm") if found else (None, "unknown")

    async def window(self, model: str, policy: Policy) -> int | None:
        """The model's window, or ``None`` when no source knows it."""
        return (await self.resolve(model, policy))[0]

    async def _upstream_models(self) -> dict[str, int]:
        if self._fetch is None or self._clock() < self._expires:
            return self._upstream
        async with self._lock:
            if self._clock() < self._expires:  # another caller refreshed it meanwhile
                return self._upstream
            try:
                self._upstream = parse_models(await self._fetch())
                self._expires = self._clock() + self._ttl
            except Exception as e:  # fail soft: the next source answers instead
                log.warning("window discovery: upstream /v1/models failed: %s", e)
                self._expires = self._clock() + self._error_ttl
            return self._upstream

    async def _from_litellm(self, model: str) -> int | None:
        if self._litellm is None:
            return None
        if model not in self._litellm_cache:
            self._litellm_cache[model] = await asyncio.to_thread(self._litellm, model)
        return self._litellm_cache[model]
