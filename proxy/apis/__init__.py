"""The APIs the proxy manages, each one module (``Api``); ``APIS`` by route name."""

from __future__ import annotations

from proxy.apis import chat_completions, messages, responses
from proxy.apis.api import Api

APIS: dict[str, Api] = {
    api.name: api for api in (chat_completions.API, messages.API, responses.API)}
"""Every managed API by its route's name (``chat``, ``messages``, ``responses``)."""

ADAPTED: tuple[Api, ...] = tuple(api for api in APIS.values() if api.read is not None)
"""The APIs read through an adapter (their routes share one handler)."""
