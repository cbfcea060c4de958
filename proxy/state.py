"""The application's typed state: what every handler reaches through ``request.app[STATE]``."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from proxy.apis.api import Api
from proxy.auth import Authenticator, Principal
from proxy.context.checked import CheckedLists
from proxy.context.managed import ContextService
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.settings import Settings
from proxy.store import Store
from proxy.upstream.client import Upstream


def upstream_for(api: Api, openai: Upstream, anthropic: Upstream) -> Upstream:
    """Where every call of ``api`` goes (managed, relayed as it came, passed through, or the
    proxy's own summary call in that API): the Anthropic-compatible upstream ``anthropic``
    (``CONTEXT_PROXY_ANTHROPIC_URL``) for an Anthropic API (``Api.anthropic``), the
    OpenAI-compatible ``openai`` (``CONTEXT_PROXY_UPSTREAM_URL``) otherwise."""
    return anthropic if api.anthropic else openai


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

    def upstream_of(self, api: Api) -> Upstream:
        """Where every call of ``api`` goes (``upstream_for``)."""
        return upstream_for(api, self.upstream, self.anthropic)

    def upstream_key(self, api: Api, principal: Principal) -> str | None:
        """The key ``principal``'s calls of ``api`` carry upstream: with proxy keys, an
        Anthropic API's is the platform's Anthropic key (``CONTEXT_PROXY_ANTHROPIC_API_KEY``);
        otherwise the principal's own (``Principal.upstream_key``)."""
        if api.anthropic and self.auth.mode == "proxy_keys":
            return self.settings.anthropic_api_key
        return principal.upstream_key


STATE: web.AppKey[ProxyState] = web.AppKey("state", ProxyState)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
