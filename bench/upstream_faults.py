"""Upstream faults on every managed API, streamed and not: what each client gets.

For each fault of the fake upstream (``proxy.testing.fake.faults``) and each of chat completions,
Responses and Messages, one request streamed and one not, through the proxy (in process, on a
loopback port, in front of the fake): an HTML error page from a gateway (502), a plain-text 500,
an answer without Content-Length or chunked framing that ends early with a FIN or a reset
(``unframed_fin``, ``unframed_reset``), a chunked one that ends cleanly before its final event
(``early_end``) or is reset, and an answer that echoes the upstream key gzip-compressed (a
whole body, ``echo_gzip``; for a streamed request a stream of the API, ``echo_gzip_stream``).

Each answer is judged: an error before any byte of the answer must be the API's own error
shape (OpenAI's ``{"error": {...}}``, Anthropic's ``{"type": "error", ...}``); a stream must
end with the API's final event or with its error event; a whole answer must be the API's; and
the upstream key must appear in no header and no byte the client got. It prints the matrix and
exits 1 on any wrong shape or leaked key.

    .venv/bin/python bench/upstream_faults.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:
    sys.path.insert(0, str(BENCH.parent))

import requests  # noqa: E402

from proxy.apis import APIS  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream, Fault  # noqa: E402
from proxy.testing.harness import Harness  # noqa: E402

PATHS = {name: api.route for name, api in APIS.items()}
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"model": "m", "input": "hi"},
    "messages": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}}
FAULTS = {"html 502": Fault(mode="html", status=502), "text 500": Fault(mode="text"),
          "unframed, FIN": Fault(mode="unframed_fin", status=200),
          "unframed, reset": Fault(mode="unframed_reset", status=200),
          "chunked, early end": Fault(mode="early_end", status=200),
          "chunked, reset": Fault(mode="reset", status=200),
          "gzip echoing the key": Fault(mode="echo_gzip", status=200)}
# Which fault a streamed request meets instead (an upstream answers a stream with a stream).
STREAMED = {"gzip echoing the key": Fault(mode="echo_gzip_stream", status=200)}
FINAL = {"chat": b"data: [DONE]", "responses": b"response.completed",
         "messages": b"message_stop"}
ERROR_EVENT = {"chat": b'data: {"error": ', "responses": b'data: {"error": ',
               "messages": b"event: error\ndata: "}


def error_shaped(api: str, data: bytes) -> bool:
    try:
        doc = json.loads(data)
    except ValueError:
        return False
    if api == "messages":
        return doc.get("type") == "error" and "message" in doc.get("error", {})
    return isinstance(doc.get("error"), dict) and {"message", "type", "code"} <= set(doc["error"])


def judge(api: str, stream: bool, status: int, data: bytes) -> str:
    """What the client got, in a few words; "WRONG ..." when it is not a right shape."""
    if status >= 400:
        return f"{status} error in the API's shape" if error_shaped(api, data) \
            else f"WRONG: {status} not in the API's shape"
    if stream:
        last = data.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        if last.startswith(ERROR_EVENT[api]):
            return "200 stream, ends with the API's error event"
        if FINAL[api] in last:
            return "200 stream, complete"
        return "WRONG: 200 stream ending in neither its final nor its error event"
    try:
        doc = json.loads(data)
    except ValueError:
        return "WRONG: 200 whole answer that is not JSON"
    kinds = {"chat": "chat.completion", "responses": "response", "messages": "message"}
    return "200 whole answer" if kinds[api] in (doc.get("object"), doc.get("type")) \
        else "200 whole answer of another shape"


def main() -> int:
    bad = 0
    print(f"{'fault':<28} {'api':<10} {'stream':<7} outcome")
    for name, fault in FAULTS.items():
        for api, path in PATHS.items():
            for stream in (False, True):
                shown = STREAMED.get(name, fault) if stream else fault
                fake = FakeUpstream(faults=[Fault(**{**shown.__dict__, "path": path,
                                                     "times": -1})])
                with Harness(Path(tempfile.mkdtemp(prefix="upstream-faults-")), fake=fake) as h:
                    key, secret = h.create_key("acme"), h.upstream_key
                    resp = requests.post(h.base_url + path.removeprefix("/v1"), timeout=30,
                                         json={**BODIES[api], "stream": stream},
                                         headers={"Authorization": f"Bearer {key}"})
                outcome = judge(api, stream, resp.status_code, resp.content)
                heads = "\n".join(f"{k}: {v}" for k, v in resp.raw.headers.items())
                if secret.encode() in resp.content or secret in heads:
                    outcome = "WRONG: the upstream key reached the client; " + outcome
                elif b"you sent" in resp.content:
                    outcome += " (the echo, the key redacted)"
                bad += outcome.startswith("WRONG")
                print(f"{name:<28} {api:<10} {'yes' if stream else 'no':<7} {outcome}")
    print(f"{len(FAULTS) * len(PATHS) * 2} answers, {bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
