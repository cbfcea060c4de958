"""Hostile request bodies on the three managed APIs, against a real ``serve`` process.

For each of ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages``: ``--per-api``
bodies (300 by default, seeded: the same every run), a third each of

- wrong-typed fields: a valid body with one field (top level, a message, a content block, a
  tool call) replaced by a value of another type (list, object, number, boolean, null, text);
- deep nesting: a value nested 200 to 5,000 deep (arrays or objects) in the content, a block,
  a tool's input or a top-level field, below and above the JSON parser's limit;
- bad encodings: a ``Content-Encoding`` (gzip, deflate, br, zstd, an unknown one) the body
  does not decode under, gzip cut short, gzip of text that is not JSON, bytes that are not
  UTF-8, lone surrogates, a UTF-16 body, a byte-order mark.

The proxy (SQLite, a fresh file) runs in front of the fake upstream (a process of its own);
every answer must be under 500, every 4xx in its API's error shape, and the proxy's log must
hold no traceback and no ERROR line. It prints the answers by status per API and category, and
exits 1 when any of those fails.

    .venv/bin/python bench/hostile_bodies.py [--per-api 300] [--seed 24]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gzip
import json
import random
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
for _path in (str(BENCH.parent), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import aiohttp  # noqa: E402
from _procs import Procs, child_env, tail, wait_http  # noqa: E402
from _servers import UPSTREAM_KEY, free_port, start_fake  # noqa: E402

from proxy.apis import APIS  # noqa: E402

ROUTES = {name: api.route for name, api in APIS.items()}
WRONG: list[Any] = [["x"], {"a": 1}, 7, -1.5, True, None, "x", 2**70, [[{}]], {"type": []}]
Body = dict[str, Any]
DEEP = "\u0000DEEP\u0000"  # stands for a nested value until the body is serialized


def base(api: str) -> Body:
    """A valid body of the API, with a tool call and its result (every kind of block)."""
    if api == "messages":
        return {"model": "claude-x", "max_tokens": 16, "system": "Be brief.", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "read a"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "reading"},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "aaa"}]}],
            "tools": [{"name": "read", "input_schema": {"type": "object"}}]}
    if api == "responses":
        return {"model": "gpt-4o", "instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "read a"}]},
            {"type": "function_call", "call_id": "c1", "name": "read",
             "arguments": "{\"path\": \"a\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "aaa"}],
            "tools": [{"type": "function", "name": "read", "parameters": {"type": "object"}}]}
    return {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "read a"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read", "arguments": "{\"path\": \"a\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "aaa"}],
        "tools": [{"type": "function", "function": {"name": "read", "parameters": {}}}]}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def put(body: Body, path: tuple[Any, ...], value: Any) -> Body:
    node: Any = body
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return body


def wrong_typed(api: str, rng: random.Random) -> tuple[bytes, dict[str, str]]:
    body = base(api)
    for _ in range(rng.choice((1, 1, 2))):
        path = rng.choice(paths(body))
        put(body, path, copy.deepcopy(rng.choice(WRONG)))
    if rng.random() < 0.2:
        body["stream"] = True
    return json.dumps(body).encode(), {}


def deeply_nested(api: str, rng: random.Random) -> tuple[bytes, dict[str, str]]:
    body = base(api)
    path = rng.choice(paths(body))
    put(body, path, DEEP)
    depth = rng.choice((200, 900, 990, 1000, 1020, 1100, 2000, 5000))
    opener, closer = (b"[", b"]") if rng.random() < 0.5 else (b'{"a":', b"}")
    nested = opener * depth + b"1" + closer * depth
    return json.dumps(body).encode().replace(json.dumps(DEEP).encode(), nested), {}


def badly_encoded(api: str, rng: random.Random) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(base(api)).encode()
    kind = rng.randrange(11)
    if kind == 0:
        return raw, {"Content-Encoding": rng.choice(("gzip", "deflate", "br", "zstd"))}
    if kind == 1:
        return gzip.compress(raw)[:rng.randrange(5, 40)], {"Content-Encoding": "gzip"}
    if kind == 2:
        return gzip.compress(b"not json at all {"), {"Content-Encoding": "gzip"}
    if kind == 3:
        return zlib.compress(raw)[:-4], {"Content-Encoding": "deflate"}
    if kind == 4:
        return raw, {"Content-Encoding": rng.choice(("x-unknown", "gzip, gzip", "compress"))}
    if kind == 5:  # bytes that are not UTF-8 inside a string
        return raw.replace(b"read a", b"read \xff\xfe\xc3"), {}
    if kind == 6:
        return raw.replace(b"read a", b"\\ud800 \\udc00x"), {}
    if kind == 7:
        return json.dumps(base(api)).encode("utf-16"), {
            "Content-Type": "application/json; charset=utf-16"}
    if kind == 8:
        return b"\xef\xbb\xbf" + raw, {}
    if kind == 9:
        return gzip.compress(gzip.compress(raw)), {"Content-Encoding": "gzip"}
    return raw[:rng.randrange(1, len(raw))], {}  # cut short


CATEGORIES: dict[str, Callable[[str, random.Random], tuple[bytes, dict[str, str]]]] = {
    "wrong-typed": wrong_typed, "deep": deeply_nested, "encoding": badly_encoded}


def shaped(api: str, status: int, text: str) -> bool:
    """Whether an error answer is in the API's own error shape."""
    if status < 400:
        return True
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    if api == "messages":
        return doc.get("type") == "error" and isinstance(doc.get("error"), dict) and \
            {"type", "message"} <= set(doc["error"])
    return isinstance(doc.get("error"), dict) and {"message", "type", "code"} <= set(doc["error"])


async def post(session: aiohttp.ClientSession, url: str, data: bytes,
               headers: dict[str, str]) -> tuple[int, str]:
    """(status, body) of one request; (0, what failed) when no answer came."""
    try:
        async with session.post(url, data=data, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=60)) as resp:
            return resp.status, (await resp.read()).decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError) as e:
        return 0, f"no answer: {type(e).__name__}: {e}"


async def run(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="hostile-bodies-"))
    procs = Procs(tmp)
    rng = random.Random(args.seed)
    failures: list[str] = []
    try:
        upstream = await start_fake(procs, 0.0)
        port = free_port()
        env = child_env({"CONTEXT_PROXY_UPSTREAM_URL": upstream,
                         "CONTEXT_PROXY_ANTHROPIC_URL": upstream,
                         "CONTEXT_PROXY_UPSTREAM_API_KEY": UPSTREAM_KEY,
                         "CONTEXT_PROXY_DB": str(tmp / "proxy.db"),
                         "CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_HOST": "127.0.0.1"})
        created = await asyncio.to_thread(__import__("subprocess").run, [
            sys.executable, "-m", "proxy.cli", "keys", "create", "--org", "bench"],
            env=env, cwd=BENCH.parent, capture_output=True, timeout=120, check=True)
        key = json.loads(created.stdout.decode().strip().splitlines()[-1])["key"]
        proc = procs.spawn("proxy", [sys.executable, "-m", "proxy.cli", "serve"], env)
        url = f"http://127.0.0.1:{port}"
        # A connection of its own per request: a refused body may leave its connection closed.
        async with aiohttp.ClientSession(auto_decompress=False, connector=aiohttp.TCPConnector(
                force_close=True)) as session:
            await wait_http(session, url + "/healthz", proc, 60)
            counts: Counter[tuple[str, str, int]] = Counter()
            for api, route in ROUTES.items():
                for n in range(args.per_api):
                    category = list(CATEGORIES)[n % len(CATEGORIES)]
                    data, extra = CATEGORIES[category](api, rng)
                    headers = {"Authorization": f"Bearer {key}", "x-api-key": key,
                               "Content-Type": "application/json", **extra}
                    status, text = await post(session, url + route, data, headers)
                    counts[(api, category, status)] += 1
                    if status >= 500 or status == 0 or not shaped(api, status, text):
                        failures.append(f"{api} {category} #{n} ({extra or 'plain'}, "
                                        f"{len(data)} bytes): {status} {text[:160]!r}")
        procs.stop()
        log = (tmp / "proxy.log").read_text(errors="replace")
        tracebacks = log.count("Traceback")
        errors = sum(1 for line in log.splitlines() if " ERROR " in line)
        warnings = sum(1 for line in log.splitlines() if " WARNING " in line)
        print(f"{'api':<10} {'category':<12} answers by status")
        for api in ROUTES:
            for category in CATEGORIES:
                by = {s: c for (a, k, s), c in sorted(counts.items()) if a == api and k == category}
                print(f"{api:<10} {category:<12} " + ", ".join(f"{s}: {c}" for s, c in by.items()))
        fives = sum(c for (_, _, s), c in counts.items() if s >= 500)
        unanswered = sum(c for (_, _, s), c in counts.items() if s == 0)
        print(f"bodies sent: {sum(counts.values())}; 5xx: {fives}; no answer: {unanswered}; "
              f"answers not in their API's shape: {len(failures) - fives - unanswered}; "
              f"tracebacks in the proxy's log: {tracebacks}; ERROR lines: {errors}; "
              f"WARNING lines: {warnings}")
        for line in failures[:20]:
            print("  " + line)
        if tracebacks or errors:
            print("log: " + tail(tmp / "proxy.log", 12))
        return 1 if failures or tracebacks or errors else 0
    finally:
        procs.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-api", type=int, default=300)
    parser.add_argument("--seed", type=int, default=24)
    raise SystemExit(asyncio.run(run(parser.parse_args())))
