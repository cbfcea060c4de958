"""The admin console: server-rendered pages under ``/admin/ui/`` (SPEC section 10).

Registered by ``proxy.app`` only when ``CONTEXT_PROXY_ADMIN_TOKEN`` is set (otherwise every
``/admin/ui/`` path is a plain 404, like the admin API). Templates and the one script and style
file ship as package data, so the console needs no build step and works offline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from proxy.console import pages, policy
from proxy.console.session import PATH, Sessions
from proxy.console.signouts import Refresher
from proxy.console.throttle import SignInThrottle
from proxy.console.web import SESSIONS, SIGNOUTS, THROTTLE, static
from proxy.state import STATE


async def _signouts(app: web.Application) -> AsyncIterator[None]:
    """Read the stored sign-outs before serving (a restart keeps them), then keep reading."""
    refresher = app[SIGNOUTS] = Refresher(app[STATE].store, app[SESSIONS])
    await refresher.refresh()
    task = asyncio.create_task(refresher.run(), name="console-signouts")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def add_routes(app: web.Application, admin_token: str) -> None:
    """Register the console's routes; call only when an admin token is configured (after the
    app's resources: the sign-outs need the store)."""
    app[SESSIONS] = Sessions(admin_token)
    app[THROTTLE] = SignInThrottle()
    app.cleanup_ctx.append(_signouts)
    app.router.add_get(PATH + "static/{name}", static, name="console_static")
    pages.add_routes(app)
    policy.add_routes(app)
