"""The floor for this stack: a bare aiohttp relay that parses the JSON body and forwards it.

No auth, no policy, no metrics: it reads the body, ``json.loads`` it (to learn ``stream``),
forwards the raw bytes to the upstream with one shared ``ClientSession`` and relays the answer,
chunk by chunk when ``stream`` is true. ``bench/overhead.py`` measures context-proxy against it.

    python bench/bare_relay.py --port 8090 --upstream http://127.0.0.1:8081/v1
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM: web.AppKey[str] = web.AppKey("upstream", str)


async def chat(request: web.Request) -> web.StreamResponse:
    raw = await request.read()
    body = json.loads(raw)
    headers = {"Content-Type": "application/json",
               "Authorization": request.headers.get("Authorization", "")}
    async with request.app[SESSION].post(request.app[UPSTREAM] + "/chat/completions",
                                         data=raw, headers=headers) as up:
        ctype = up.headers.get("Content-Type", "application/json")
        if not (body.get("stream") is True and ctype.startswith("text/event-stream")):
            return web.Response(status=up.status, body=await up.read(),
                                headers={"Content-Type": ctype})
        out = web.StreamResponse(status=up.status, headers={"Content-Type": ctype})
        await out.prepare(request)
        async for chunk in up.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
        return out


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def make_app(upstream: str) -> web.Application:
    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        app[SESSION] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                             auto_decompress=False)
        yield
        await app[SESSION].close()

    app = web.Application(client_max_size=32 * 1024 * 1024)
    app[UPSTREAM] = upstream.rstrip("/")
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/healthz", healthz)
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="OpenAI-compatible base URL ending in /v1")
    args = p.parse_args()
    web.run_app(make_app(args.upstream), host=args.host, port=args.port, access_log=None,
                print=None)


if __name__ == "__main__":
    main()
