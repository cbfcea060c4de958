"""The application's typed state: what every handler reaches through ``request.app[STATE]``."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from proxy.auth import Authenticator
from proxy.context.checked import CheckedLists
from proxy.context.managed import ContextService
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.settings import Settings
from proxy.store import Store
from proxy.upstream.client import Upstream


@dataclass(frozen=True)
class ProxyState:
    settings: Settings
    store: Store
    auth: Authenticator
    upstream: Upstream
    metrics: Metrics
    policies: PolicyService
    context: ContextService
    checked: CheckedLists  # message lists already checked, so a resent history is not again
    anthropic: Upstream  # the Anthropic-compatible upstream of /v1/messages
    # (upstream URL, model) pairs whose upstream refused a compaction_trigger
    # (proxy.http.inband.trigger)
    trigger_refused: set[tuple[str, str]] = field(default_factory=set)


STATE: web.AppKey[ProxyState] = web.AppKey("state", ProxyState)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
