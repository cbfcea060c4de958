"""``serve``'s look at the upstream URL at start: a base URL without a version segment, or one
whose ``/models`` does not answer as an OpenAI-compatible server does, gets one WARNING naming
what to fix. Start-up never waits for it and never fails on it (the upstream may be down)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from proxy.settings import Settings

log = logging.getLogger("context_proxy")
PROBE_TIMEOUT_S = 3.0
SETTING = "CONTEXT_PROXY_UPSTREAM_URL"
# /v1, /v4, /v1beta (Gemini's /v1beta/openai), anywhere in the path (Azure, gateways).
_VERSION = re.compile(r"^v\d+([a-z]+\d*)?$")
_TASK: web.AppKey[asyncio.Task[None]] = web.AppKey("upstream_check", asyncio.Task)


def version_problem(url: str) -> str | None:
    """What is wrong with ``url``'s path (no version segment), or None."""
    parts = urlsplit(url)
    if any(_VERSION.match(seg) for seg in parts.path.split("/")):
        return None
    return (f"upstream {parts.scheme}://{parts.netloc}{parts.path} has no version segment: "
            f"every request would miss; set {SETTING} to its OpenAI-compatible base URL, "
            f"usually ending in /v1 ({url.rstrip('/')}/v1)")


def answer_problem(url: str, status: int, body: object) -> str | None:
    """What ``GET {url}/models`` answering ``status`` with ``body`` (parsed JSON, or None)
    says is wrong, or None: a model list, or an OpenAI-shaped error (a key it wants)."""
    if isinstance(body, dict):
        if status == 200 and isinstance(body.get("data"), list):
            return None
        if status in (401, 403) and isinstance(body.get("error"), dict | str):
            return None
    return (f"upstream {url}/models answered HTTP {status} without an OpenAI model list: "
            f"check {SETTING} (an OpenAI-compatible base URL, usually ending in /v1)")


async def probe(url: str, key: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """``GET {url}/models`` once; what is wrong with its answer, or None."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s, \
                s.get(f"{url}/models", headers=headers) as resp:
            try:
                body: object = await resp.json(content_type=None)
            except ValueError:
                body = None
            return answer_problem(url, resp.status, body)
    except (aiohttp.ClientError, TimeoutError) as e:
        reason = type(e).__name__ if isinstance(e, TimeoutError) else str(e) or type(e).__name__
        return (f"upstream {url}/models could not be reached at start ({reason}); requests "
                f"will fail until it answers: check {SETTING}")


async def _check(settings: Settings, public_url: str) -> None:
    problem = version_problem(public_url)
    if problem is None:
        problem = await probe(settings.upstream_url, settings.upstream_api_key)
        if problem is not None:
            problem = problem.replace(settings.upstream_url, public_url)
    if problem is not None:
        log.warning("%s", problem)
    else:
        log.info("upstream %s/models answers as an OpenAI-compatible server", public_url)


def install(app: web.Application, settings: Settings, public_url: str) -> None:
    """Check the upstream once the server is up, in the background (``public_url``: the URL
    as logs may show it)."""
    async def start(app: web.Application) -> None:
        app[_TASK] = asyncio.create_task(_check(settings, public_url))

    async def stop(app: web.Application) -> None:
        task = app.get(_TASK)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
